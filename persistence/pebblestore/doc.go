// Package pebblestore is the durable persistence.Store of cellserver, on a
// github.com/cockroachdb/pebble database in one directory (Open).
//
// It is apart from package persistence so that only the programs that
// keep state on disk link pebble: cmd/cellserver passes OpenStore as
// server.Config.OpenStore; an in-process server for tests (package
// cellservertest) links it only when the test imports this package.
package pebblestore
