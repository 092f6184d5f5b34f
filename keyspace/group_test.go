package keyspace

import "testing"

// groupJournal is a Journal that counts its groups.
type groupJournal struct {
	discard
	begun, ended int
}

func (g *groupJournal) BeginGroup() { g.begun++ }
func (g *groupJournal) EndGroup()   { g.ended++ }

// TestBeginGroupFindsTheBatchingConsumers: BeginGroup reaches every
// Grouper of the journal's chain, nested chains included, and only them;
// with none it returns nil.
func TestBeginGroupFindsTheBatchingConsumers(t *testing.T) {
	ks, err := New(Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if g := ks.BeginGroup(); g != nil {
		t.Fatalf("no journal: BeginGroup = %v, want nil", g)
	}
	ks.SetJournal(Chain(discard{}))
	if g := ks.BeginGroup(); g != nil {
		t.Fatalf("a journal that does not batch: BeginGroup = %v, want nil", g)
	}
	a, b := &groupJournal{}, &groupJournal{}
	ks.SetJournal(Chain(discard{}, a, Chain(discard{}, b)))
	g := ks.BeginGroup()
	if g == nil || a.begun != 1 || b.begun != 1 {
		t.Fatalf("BeginGroup = %v; begun %d and %d, want 1 each", g, a.begun, b.begun)
	}
	g.EndGroup()
	if a.ended != 1 || b.ended != 1 {
		t.Fatalf("ended %d and %d, want 1 each", a.ended, b.ended)
	}
}
