package durability

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cockroachdb/pebble"
)

// writeFormat1 writes a data directory as cellserver wrote it before
// records were keyed by hash slot (store format 1): the format record
// 0x00 = format, and each record under the database number (2 bytes,
// big-endian) and the key.
func writeFormat1(t *testing.T, dir string, format byte, recs map[int]map[string]string) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatVirtualSSTables})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	if err := b.Set([]byte{0}, []byte{format}, nil); err != nil {
		t.Fatal(err)
	}
	for d, kv := range recs {
		for k, v := range kv {
			key := append(binary.BigEndian.AppendUint16(nil, uint16(d)), k...)
			val := persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindString, Obj: []byte(v)})
			if err := b.Set(key, val, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStartOnFormat1 starts the server on a format-1 directory: it is
// migrated at start (logged with its record count), every key is served
// with its value, and the next start loads it without migrating again.
func TestStartOnFormat1(t *testing.T) {
	binproc.Binary(t)
	dir := t.TempDir()
	recs := map[int]map[string]string{0: {}, 3: {}}
	for i := range 2000 {
		recs[i%2*3][fmt.Sprintf("user:%d", i)] = fmt.Sprintf("v%d", i)
	}
	recs[0][""] = "empty key"
	writeFormat1(t, dir, 1, recs)
	ctx := context.Background()
	for start := range 2 {
		p := startServer(t, "--data-dir", dir)
		migrated := strings.Contains(p.Logs.String(), "migrated the data directory to store format 2")
		if migrated != (start == 0) || (start == 0 && !strings.Contains(p.Logs.String(), "records=2001")) {
			t.Fatalf("start %d: migration logged: %v, want %v\n%s", start, migrated, start == 0, p.Logs)
		}
		if keys, _ := p.loaded(t); keys != 2001 {
			t.Fatalf("start %d: loaded %d keys, want 2001", start, keys)
		}
		for d, kv := range recs {
			rdb := client(p.addr, 1)
			if err := rdb.Do(ctx, "SELECT", d).Err(); err != nil {
				t.Fatal(err)
			}
			for k, v := range kv {
				if got, err := rdb.Get(ctx, k).Result(); err != nil || got != v {
					t.Fatalf("start %d: db %d GET %q = %q, %v; want %q", start, d, k, got, err, v)
				}
			}
			rdb.Close()
		}
		p.stop(t)
	}
}

// TestStartOnNewerFormat: a directory of a store format this build does
// not know stops the start with a message naming the remedy.
func TestStartOnNewerFormat(t *testing.T) {
	binproc.Binary(t)
	dir := t.TempDir()
	writeFormat1(t, dir, 9, map[int]map[string]string{0: {"k": "v"}})
	code, out := runToExit(t, "--data-dir", dir)
	if code <= 0 || !strings.Contains(out, "store format 9, this build reads 2") || !strings.Contains(out, "start a newer cellserver on it") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	t.Logf("exit %d: %s", code, strings.TrimSpace(out))
}
