module github.com/cellserver/cellserver/client

go 1.22

require (
	github.com/cellserver/cellserver/gcra v0.0.0-00010101000000-000000000000
	github.com/cellserver/cellserver/limiter v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.5.5
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
)

// gcra and limiter (for client/httplimit's local fallback) are modules of
// this repository too: built from the tree until they are tagged.
replace (
	github.com/cellserver/cellserver/gcra => ../gcra
	github.com/cellserver/cellserver/limiter => ../limiter
)
