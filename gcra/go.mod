module github.com/cellserver/cellserver/gcra

go 1.22
