package keyspace

// Journal receives every change to a Keyspace in the order the changes
// happen, so that a durable copy can follow it. Its methods are called
// with the affected shard locks held (all of a database's for DeleteDB,
// all for DeleteAll) and must not block on other shards. key and v are
// only valid during the call.
type Journal interface {
	Put(db int, key []byte, v *Value)
	Delete(db int, key []byte)
	DeleteDB(db int)
	DeleteAll()
}

// Room is the backlog of the Journal's consumer (persistence's write
// queue, with its cap).
type Room interface {
	// Full reports whether the backlog is over its cap.
	Full() bool
	// WaitRoom returns once the backlog is under its cap again, or at once
	// when it cannot shrink (writes failing).
	WaitRoom()
}

// Chain returns a Journal that tells each of js about every change, in
// the order given: each call returns before the next journal is told, all
// under the same shard locks, so every journal sees the changes in the
// same order. Nil entries are skipped and nested chains flattened. With
// no journal left it returns nil (a keyspace without a journal neither
// calls one nor tracks changes); with one, that journal itself.
func Chain(js ...Journal) Journal {
	var c chain
	for _, j := range js {
		switch j := j.(type) {
		case nil:
		case chain:
			c = append(c, j...)
		default:
			c = append(c, j)
		}
	}
	switch len(c) {
	case 0:
		return nil
	case 1:
		return c[0]
	}
	return c
}

// chain is Chain's Journal.
type chain []Journal

func (c chain) Put(db int, key []byte, v *Value) {
	for _, j := range c {
		j.Put(db, key, v)
	}
}

func (c chain) Delete(db int, key []byte) {
	for _, j := range c {
		j.Delete(db, key)
	}
}

func (c chain) DeleteDB(db int) {
	for _, j := range c {
		j.DeleteDB(db)
	}
}

func (c chain) DeleteAll() {
	for _, j := range c {
		j.DeleteAll()
	}
}

// SetJournal makes j the keyspace's Journal (nil: none), in place of
// Config.Journal or the one an earlier call set: whoever owns the
// keyspace composes every consumer of its changes into one Journal with
// Chain and sets it here (server.New does). It is not safe for concurrent
// use: call it before the keyspace serves commands.
func (ks *Keyspace) SetJournal(j Journal) {
	ks.journal = j
	ks.grouper = grouperOf(j)
	for _, db := range ks.dbs {
		for i := range db.shards {
			db.shards[i].journal = j
		}
	}
}

// Grouper is implemented by a Journal whose consumer writes changes in
// batches (persistence's Writer): the changes told between BeginGroup and
// EndGroup land in one batch. A group must not wait for the consumer
// (its room, its durability) before it ends.
type Grouper interface {
	BeginGroup()
	EndGroup()
}

// BeginGroup opens a group of changes that must reach the journal's
// batching consumers together: a command that changes several keys (an
// audited CL.APPLY, MSET, RENAME, EXEC) calls it once it holds every
// shard lock it needs, and calls EndGroup on the result, when it is not
// nil, before releasing them. (A group must begin after the locks: a
// consumer about to take a batch waits for the open groups, and makes
// new ones wait, so a group that waited for a lock could wait forever.)
// Nil means no consumer batches.
func (ks *Keyspace) BeginGroup() Grouper {
	g := ks.grouper
	if g != nil {
		g.BeginGroup()
	}
	return g
}

// Grouping reports whether a journal consumer batches changes (so that
// BeginGroup does something).
func (ks *Keyspace) Grouping() bool { return ks.grouper != nil }

// grouperOf returns the Grouper of j's consumers (nil: none).
func grouperOf(j Journal) Grouper {
	var gs groupers
	var walk func(j Journal)
	walk = func(j Journal) {
		switch j := j.(type) {
		case chain:
			for _, m := range j {
				walk(m)
			}
		case Grouper:
			gs = append(gs, j)
		}
	}
	walk(j)
	switch len(gs) {
	case 0:
		return nil
	case 1:
		return gs[0]
	}
	return gs
}

// groupers is the Grouper of several consumers.
type groupers []Grouper

func (gs groupers) BeginGroup() {
	for _, g := range gs {
		g.BeginGroup()
	}
}

func (gs groupers) EndGroup() {
	for i := len(gs) - 1; i >= 0; i-- {
		gs[i].EndGroup()
	}
}
