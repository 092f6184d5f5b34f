package keyspace

import "testing"

// lfuCount decays the counter by one per minute since its last decay,
// across the 16-bit minute clock's wrap, as Redis's LFUDecrAndReturn.
func TestLFUCountDecay(t *testing.T) {
	for _, tc := range []struct {
		ldt, counter uint32
		sec          int64
		want         uint32
	}{
		{ldt: 10, counter: 5, sec: 10 * 60, want: 5},
		{ldt: 10, counter: 5, sec: 12*60 + 59, want: 3},
		{ldt: 10, counter: 5, sec: 20 * 60, want: 0},
		{ldt: 0xfffe, counter: 9, sec: 0x10001 * 60, want: 7}, // 0xfffe -> 1: 0xffff-0xfffe+1 = 2 minutes, as Redis counts
	} {
		if got := lfuCount(tc.ldt<<8|tc.counter, tc.sec); got != tc.want {
			t.Errorf("lfuCount(ldt %d, counter %d) at minute %d = %d, want %d", tc.ldt, tc.counter, tc.sec/60, got, tc.want)
		}
	}
	if lfuIncr(255) != 255 {
		t.Error("lfuIncr(255) passed 255")
	}
	for c := uint32(0); c <= lfuInitVal; c++ {
		if lfuIncr(c) != c+1 {
			t.Errorf("lfuIncr(%d): the increments up to LFU_INIT_VAL+1 are certain", c)
		}
	}
}

// Inspect reads a key's access record without counting an access; under
// LRU Idle is the seconds since the last Lookup or Peek, modulo 2^24.
func TestInspectIdle(t *testing.T) {
	ks := newKS(t, 1)
	sh := ks.DB(0).ShardAt(0)
	key := []byte("k")
	h := ks.Hash(key)
	sh.Lock()
	defer sh.Unlock()
	sh.LookupHash(key, h, 1000_000)
	sh.ReplaceHash(key, h, nil, Value{Kind: KindString, Obj: []byte("v")})
	for _, now := range []int64{1000_000, 1090_000, 1090_000} {
		_, acc := sh.InspectHash(key, h, now)
		if idle, ok := acc.Idle(now); !ok || idle != (now-1000_000)/1000 {
			t.Errorf("Idle at %d = %d, %v; want %d", now, idle, ok, (now-1000_000)/1000)
		}
		if _, ok := acc.Freq(now); ok {
			t.Error("Freq answered under LRU")
		}
	}
	sh.PeekHash(key, h, 1100_000)
	if _, acc := sh.InspectHash(key, h, 1105_000); func() int64 { n, _ := acc.Idle(1105_000); return n }() != 5 {
		t.Error("Peek did not count as an access")
	}
	if v, _ := sh.InspectHash([]byte("nokey"), ks.Hash([]byte("nokey")), 0); v != nil {
		t.Error("Inspect of a missing key returned a value")
	}
}

// RandomKey skips expired entries and answers nil when only they are left.
func TestShardRandomKeyExpired(t *testing.T) {
	ks := newKS(t, 1)
	sh := ks.DB(0).ShardAt(0)
	sh.Lock()
	defer sh.Unlock()
	if sh.RandomKey(0) != nil {
		t.Error("RandomKey of an empty shard")
	}
	for i := range 200 {
		sh.Set([]byte{byte(i), 'x'}, Value{Kind: KindString, Exp: 10})
	}
	sh.Set([]byte("live"), Value{Kind: KindString})
	for range 100 {
		if k := sh.RandomKey(11); string(k) != "live" {
			t.Fatalf("RandomKey = %q, want the one live key", k)
		}
	}
	sh.Delete([]byte("live"), 11)
	if k := sh.RandomKey(11); k != nil {
		t.Errorf("RandomKey with only expired keys = %q", k)
	}
}
