package pebblestore

import (
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/internal/storetest"
)

// The conformance suite's helpers, under the names this package's tests use.
type (
	record = storetest.Record
	model  = storetest.Model
)

var (
	loadAll      = storetest.LoadAll
	checkRecords = storetest.CheckRecords
	mustWrite    = storetest.MustWrite
	put          = storetest.Put
	del          = storetest.Del
	delDB        = storetest.DelDB
	delAll       = storetest.DelAll
)

func TestStoreMemFS(t *testing.T) {
	storetest.Run(t, storetest.Opener(func(t *testing.T) func() (persistence.Store, error) {
		fs := vfs.NewMem()
		return func() (persistence.Store, error) { return Open("/data", Options{FS: fs}) }
	}))
}

func TestStoreDisk(t *testing.T) {
	storetest.Run(t, storetest.Opener(func(t *testing.T) func() (persistence.Store, error) {
		dir := t.TempDir()
		return func() (persistence.Store, error) { return Open(dir, Options{}) }
	}))
}
