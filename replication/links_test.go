package replication

import (
	"errors"
	"io"
	"log/slog"
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

// TestPsyncCapsReplicas: past MaxReplicas links (those answered and not
// yet served included), PSYNC is refused.
func TestPsyncCapsReplicas(t *testing.T) {
	r := newTestReplication(t, Config{MaxReplicas: 3})
	for i := 0; i < 3; i++ {
		if _, err := r.Psync("?", -1, "127.0.0.1", i); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	if n := r.Links(); n != 3 {
		t.Errorf("Links %d, want 3 (answered, being handed over)", n)
	}
	if _, err := r.Psync("?", -1, "127.0.0.1", 9); !errors.Is(err, ErrMaxReplicas) {
		t.Errorf("the 4th replica: %v, want ErrMaxReplicas", err)
	}
}
