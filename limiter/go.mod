module github.com/cellserver/cellserver/limiter

go 1.22
