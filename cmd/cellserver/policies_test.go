package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cellserver/cellserver/internal/binproc"
)

// TestPoliciesSIGHUP: with --policies, SIGHUP reloads the file (logged
// with what changed); an invalid file is refused on SIGHUP (logged with
// every problem) and the policies in force stay; and a start with an
// invalid file fails, listing every problem.
func TestPoliciesSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := binproc.Binary(t)
	file := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(src string) {
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 1m}\n  - {name: b, algorithm: fixed, limit: 5, period: 1m}\n")
	p := startSig(t, bin, "--policies", file)
	rdb := sigClient(p.addr)
	defer rdb.Close()
	ctx := context.Background()
	apply := func(key, pol string) []int64 {
		t.Helper()
		v, err := rdb.Do(ctx, "CL.APPLY", key, pol).Int64Slice()
		if err != nil {
			t.Fatalf("CL.APPLY %s %s: %v", key, pol, err)
		}
		return v
	}
	if v := apply("k", "a"); v[0] != 0 || v[1] != 1 {
		t.Fatalf("a before the reload: %v", v)
	}
	apply("kb", "b")
	write("policies:\n  - {name: a, algorithm: fixed, limit: 3, period: 1m}\n  - {name: b, algorithm: fixed, limit: 5, period: 1m}\n  - {name: c, algorithm: gcra, count: 1, period: 1s}\n")
	p.signal(t, syscall.SIGHUP)
	p.waitLine(t, "policies reloaded", "added=c", "changed=a", "unchanged=1")
	if v := apply("k", "a"); v[0] != 0 || v[1] != 3 || v[2] != 1 {
		t.Fatalf("a after the reload (limit 3, the key's count of 1 kept): %v", v)
	}
	if v := apply("kb", "b"); v[2] != 3 {
		t.Fatalf("b, unchanged, keeps its state: %v", v)
	}
	write("policies:\n  - {name: a, algorithm: fixed, limit: 0, period: 1m}\n  - {name: b, algorithm: nope}\n")
	p.signal(t, syscall.SIGHUP)
	p.waitLine(t, "policy reload refused", "2 problems", "limit must be a positive integer", "unknown algorithm")
	if v := apply("k", "a"); v[1] != 3 {
		t.Fatalf("a after a refused reload: %v", v)
	}
	if names, err := rdb.Do(ctx, "CL.POLICY", "LIST").StringSlice(); err != nil || strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("CL.POLICY LIST after a refused reload: %v, %v", names, err)
	}

	var stderr bytes.Buffer
	if code := run([]string{"--addr", "127.0.0.1:0", "--policies", file}, &stderr, &stderr); code == 0 {
		t.Fatal("started with an invalid policy file")
	}
	for _, w := range []string{"cannot start", "2 problems", "limit must be a positive integer", "unknown algorithm \"nope\""} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("start with an invalid file: %q not in\n%s", w, stderr.String())
		}
	}
}
