package replication

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
)

func newTestReplication(t *testing.T, cfg Config) *Replication {
	t.Helper()
	ks, err := keyspace.New(keyspace.Config{Databases: 1, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Keyspace = ks
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHelloRefusesLoops: a node refuses as a replica itself and the nodes
// above it, and tells any other its own ID and theirs.
func TestHelloRefusesLoops(t *testing.T) {
	r := newTestReplication(t, Config{})
	above := []string{strings.Repeat("a", 40), strings.Repeat("b", 40)}
	r.mu.Lock()
	r.setUpstream(above)
	r.mu.Unlock()
	for _, node := range append([]string{r.NodeID()}, above...) {
		if _, err := r.Hello(node); !errors.Is(err, ErrLoop) {
			t.Errorf("Hello(%s): %v, want ErrLoop", node, err)
		}
		if _, err := r.Psync("?", -1, "127.0.0.1", 1, node); !errors.Is(err, ErrLoop) {
			t.Errorf("Psync from %s: %v, want ErrLoop", node, err)
		}
	}
	ids, err := r.Hello(strings.Repeat("c", 40))
	if err != nil || ids != r.NodeID()+" "+above[0]+" "+above[1] {
		t.Errorf("Hello from another node: %q, %v", ids, err)
	}
	chain, err := parseChain("+OK " + ids)
	if err != nil || len(chain) != 3 || chain[0] != r.NodeID() {
		t.Errorf("parseChain: %v, %v", chain, err)
	}
	for _, bad := range []string{"+OK xyz", "-ERR no", "+OK " + strings.Repeat(strings.Repeat("d", 40)+" ", maxChain+1)} {
		if _, err := parseChain(bad); err == nil {
			t.Errorf("parseChain(%.60q) accepted", bad)
		}
	}
}

// TestPsyncCapsReplicas: past MaxReplicas links (those answered and not
// yet served included), PSYNC is refused.
func TestPsyncCapsReplicas(t *testing.T) {
	r := newTestReplication(t, Config{MaxReplicas: 3})
	for i := 0; i < 3; i++ {
		if _, err := r.Psync("?", -1, "127.0.0.1", i, ""); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	if n := r.Links(); n != 3 {
		t.Errorf("Links %d, want 3 (answered, being handed over)", n)
	}
	if _, err := r.Psync("?", -1, "127.0.0.1", 9, ""); !errors.Is(err, ErrMaxReplicas) {
		t.Errorf("the 4th replica: %v, want ErrMaxReplicas", err)
	}
}
