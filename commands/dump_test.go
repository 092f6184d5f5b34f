package commands_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// crcJonesBitwise is Redis's crc64 (src/crc64.c: Jones polynomial,
// reflected, initial value 0, no final xor) one bit at a time: an
// implementation independent of the table-driven one DUMP uses.
func crcJonesBitwise(b []byte) uint64 {
	var crc uint64
	for _, c := range b {
		crc ^= uint64(c)
		for range 8 {
			if crc&1 == 1 {
				crc = crc>>1 ^ 0x95ac9329ac4bc9b5
			} else {
				crc >>= 1
			}
		}
	}
	return crc
}

// TestDumpPayload: for a key of every kind, DUMP's payload is the
// persistence codec's encoding of the key's value, which decodes to the
// key's kind and its expiry (as PEXPIRETIME reports it), then version 1 and
// the CRC of what precedes, little endian. A missing key gets nil.
func TestDumpPayload(t *testing.T) {
	clock := servertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, addr := servertest.Start(t, server.Config{Clock: clock.Now})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	setup := [][]any{
		{"SET", "str", "v"},
		{"SET", "strx", "v", "PX", "60000"},
		{"CL.THROTTLE", "gcra", 10, 5, 60},
		{"CL.FIXED", "fixed", 3, "10s"},
		{"CL.SLIDING", "sliding", 3, "10s"},
		{"CL.SLIDINGLOG", "log", 3, "10s", 2},
		{"CL.ACQUIRE", "leases", 2, "30s", "tok"},
	}
	wantKind := map[string]keyspace.Kind{
		"str": keyspace.KindString, "strx": keyspace.KindString, "gcra": keyspace.KindGCRA,
		"fixed": keyspace.KindFixed, "sliding": keyspace.KindSliding, "log": keyspace.KindLog,
		"leases": keyspace.KindLeases,
	}
	for _, c := range setup {
		if err := rdb.Do(ctx, c...).Err(); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
	for key, kind := range wantKind {
		p, err := rdb.Dump(ctx, key).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", key, err)
		}
		if len(p) < 10 {
			t.Fatalf("DUMP %s: %d bytes", key, len(p))
		}
		body, ver, crc := p[:len(p)-10], p[len(p)-10:len(p)-8], p[len(p)-8:]
		if got := binary.LittleEndian.Uint16([]byte(ver)); got != 1 {
			t.Errorf("DUMP %s: version %d, want 1", key, got)
		}
		if got, want := binary.LittleEndian.Uint64([]byte(crc)), crcJonesBitwise([]byte(p[:len(p)-8])); got != want {
			t.Errorf("DUMP %s: CRC %#x, want %#x", key, got, want)
		}
		v, err := persistence.DecodeValue([]byte(body))
		if err != nil {
			t.Fatalf("DUMP %s: decode: %v", key, err)
		}
		exp, err := rdb.Do(ctx, "PEXPIRETIME", key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if exp == -1 {
			exp = 0
		}
		if v.Kind != kind || v.Exp != exp {
			t.Errorf("DUMP %s decodes to kind %v exp %d, want kind %v exp %d (PEXPIRETIME)", key, v.Kind, v.Exp, kind, exp)
		}
	}
	if err := rdb.Dump(ctx, "missing").Err(); err != redis.Nil {
		t.Errorf("DUMP missing: %v, want nil", err)
	}
	// The payload follows the state: a second CL.THROTTLE moves the TAT.
	before := rdb.Dump(ctx, "gcra").Val()
	rdb.Do(ctx, "CL.THROTTLE", "gcra", 10, 5, 60)
	if after := rdb.Dump(ctx, "gcra").Val(); after == before {
		t.Error("DUMP gcra unchanged after a CL.THROTTLE that consumed a unit")
	}
	t.Logf("checked the DUMP payloads of %d keys", len(wantKind))
}

// TestDumpUnavailable: a commands layer built without Config.DumpValue
// answers DUMP with an error and goes on serving.
func TestDumpUnavailable(t *testing.T) {
	addr, _ := startWithStore(t, persistence.NewMemory())
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	rdb.Set(ctx, "k", "v", 0)
	err := rdb.Dump(ctx, "k").Err()
	if err == nil || err.Error() != "ERR DUMP is unavailable: this server has no value encoder" {
		t.Errorf("DUMP without an encoder: %v", err)
	}
	if got := rdb.Get(ctx, "k").Val(); got != "v" {
		t.Errorf("GET after DUMP = %q", got)
	}
}
