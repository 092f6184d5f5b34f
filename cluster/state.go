package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/keyslot"
)

// View is what a command routes by: one installed topology and where this
// node stands in it. Views are immutable, apart from the replies they keep
// (Reply); State swaps them atomically.
type View struct {
	T  *Topology // nil until a topology is installed
	ID string    // this node's id
	// Me is the shard listing this node (nil if the topology does not
	// list it); Master says whether it is that shard's master.
	Me     *Shard
	Master bool
	// Addr is this node's own listening address, shown for a node the
	// topology does not list (CLUSTER NODES, SHARDS).
	Addr Node
	// over, while a migration hands slots over (migration.go), changes
	// the topology's owners of some slots ahead of the closing config and
	// marks the slots whose writes wait (Frozen). nil: none.
	over *override

	// replies are the encoded replies built for this view (Reply), per
	// kind and protocol (0: RESP2, 1: RESP3).
	replies [numReplyKinds][2]atomic.Pointer[[]byte]
	buildMu sync.Mutex    // held while one of replies is built
	builds  *atomic.Int64 // the State's count of replies built; nil: none
}

// ReplyKind names a reply a View keeps once built (View.Reply).
type ReplyKind int

// The replies kept per view: those whose size grows with the topology.
const (
	ReplySlots  ReplyKind = iota // CLUSTER SLOTS
	ReplyShards                  // CLUSTER SHARDS
	ReplyNodes                   // CLUSTER NODES
	numReplyKinds
)

// Reply returns the encoded reply of kind for this view, in RESP3 when
// resp3 is set, else RESP2. The first call for a kind and protocol builds
// it with build and keeps it; every later call, from any client, returns
// the same bytes, until a new view replaces this one (CELLCLUSTER CONFIG,
// CELLCLUSTER MYID): a new view starts with none, so a reply never shows
// an older topology. Concurrent first calls build it once (the others wait
// for it). The caller must not modify the bytes returned. A build that
// panics keeps nothing.
func (v *View) Reply(kind ReplyKind, resp3 bool, build func() []byte) []byte {
	p := 0
	if resp3 {
		p = 1
	}
	slot := &v.replies[kind][p]
	if b := slot.Load(); b != nil {
		return *b
	}
	v.buildMu.Lock()
	defer v.buildMu.Unlock()
	if b := slot.Load(); b != nil {
		return *b
	}
	b := build()
	slot.Store(&b)
	if v.builds != nil {
		v.builds.Add(1)
	}
	return b
}

// Route says who serves slot for a command: ok when this node does (its
// shard's master; or one of its replicas for a read-only command of a
// READONLY client), else owner is the shard to redirect to (nil: no
// shard serves the slot, CLUSTERDOWN).
func (v *View) Route(slot uint16, readonlyClient, write bool) (owner *Shard, ok bool) {
	owner = v.owner(slot)
	if owner == nil {
		return nil, false
	}
	if owner == v.Me && (v.Master || readonlyClient && !write) {
		return owner, true
	}
	return owner, false
}

// Owns reports whether slot belongs to this node's shard (as its master or
// a replica): the slots whose keys it keeps.
func (v *View) Owns(slot uint16) bool {
	return v.Me != nil && v.owner(slot) == v.Me
}

// owner returns the shard serving slot: the topology's, unless a
// migration handed the slot over already (override).
func (v *View) owner(slot uint16) *Shard {
	if o := v.over; o != nil {
		if sh := o.owner[slot&(keyslot.Slots-1)]; sh != nil {
			return sh
		}
	}
	return v.T.Owner(slot)
}

// Frozen reports whether writes to slot must wait (TRYAGAIN): this node
// is handing it over to a migration's target.
func (v *View) Frozen(slot uint16) bool {
	return v.over != nil && v.over.frozen[slot&(keyslot.Slots-1)]
}

// SlotStore is the keyspace's slot API: it counts, lists and deletes the
// keys of one hash slot (deletes go through the keyspace journal, so
// persistence and replicas follow).
type SlotStore interface {
	CountKeysInSlot(db int, slot uint16) int
	KeysInSlot(db int, slot uint16, max int) [][]byte
	DeleteSlot(db int, slot uint16) int
}

// Config configures a State.
type Config struct {
	// NodeID is this node's id; empty means the one kept in
	// ConfigFile+".myid", or a new random 40-hex id (kept there when
	// ConfigFile is set).
	NodeID string
	// ConfigFile, when set, is read at New (if it exists) and rewritten
	// atomically with every topology installed.
	ConfigFile string
	// Store is where the keys of slots taken away from this node are
	// deleted; nil deletes nothing.
	Store SlotStore
	// Logger receives the background deleter's lines; nil: slog.Default().
	Logger *slog.Logger
	// Migrations: what slot migrations need (migration.go); without a
	// Keyspace, migrations declared by a topology stay in ERROR.
	Migrations MigrationConfig
}

// State is a node's cluster state: its id and the installed topology. It
// is safe for concurrent use.
type State struct {
	view  atomic.Pointer[View]
	store SlotStore
	file  string
	log   *slog.Logger

	mu sync.Mutex // serialises Install, SetMyID, SetAddr and the files
	// watchers are told of every new view (OnChange); guarded by mu.
	watchers []func(*View)

	dmu     sync.Mutex // guards the fields below: the background deleter
	pending []uint16   // slots whose keys are to be deleted, in order
	queued  [keyslot.Slots]bool
	running bool
	idle    chan struct{} // closed while the deleter is not running
	deleted atomic.Int64  // keys deleted by slot moves

	builds atomic.Int64 // replies built by its views (View.Reply)

	mig migrations // slot migrations in and out (migration.go), guarded by mu
}

// ErrInvalidID wraps the reason SetMyID refuses an id.
var ErrInvalidID = errors.New("cluster: invalid node id")

// MaxIDLen is a node id's length: 40 lower-case hex digits, the shape of
// Redis Cluster's node ids (a SHA-1 in hex; what NewID and redis-server
// generate).
const MaxIDLen = 40

// ValidID reports why id cannot be a node id ("" if it can): it must be
// exactly MaxIDLen lower-case hex digits. Redis's check
// (verifyClusterNodeId) takes 40 of [a-z0-9]; every id a Redis node makes
// is lower-case hex, and so must every id here be. Upper-case is refused
// rather than folded: ids are compared byte for byte (CLUSTER NODES,
// CLUSTER SLOTS, the topology), so "ABC…" and "abc…" would be two nodes,
// and a node given one while the topology names the other would not find
// itself in it.
func ValidID(id string) string {
	if id == "" {
		return "empty node id"
	}
	if len(id) != MaxIDLen {
		return fmt.Sprintf("node id must be %d lower-case hex digits (as Redis's), not %d bytes", MaxIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'f' {
			continue
		}
		if c >= 'A' && c <= 'F' {
			return "node id must be lower-case hex (as Redis's): upper-case is refused"
		}
		return fmt.Sprintf("node id must be %d lower-case hex digits (as Redis's)", MaxIDLen)
	}
	return ""
}

// NewID returns a random 40-hex node id, the shape of Redis's.
func NewID() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// New returns the cluster state of a node: its id, and the topology of
// cfg.ConfigFile when that file exists.
func New(cfg Config) (*State, error) {
	s := &State{store: cfg.Store, file: cfg.ConfigFile, log: cfg.Logger, idle: make(chan struct{})}
	close(s.idle)
	if s.log == nil {
		s.log = slog.Default()
	}
	s.mig.init(cfg.Migrations)
	id := cfg.NodeID
	if id != "" {
		if why := ValidID(id); why != "" {
			return nil, fmt.Errorf("cluster-node-id %q: %s", id, why)
		}
	} else if s.file != "" {
		b, err := os.ReadFile(s.idFile())
		switch {
		case err == nil:
			id = strings.TrimSpace(string(b))
			if why := ValidID(id); why != "" {
				return nil, fmt.Errorf("%s: %s", s.idFile(), why)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
	}
	if id == "" {
		id = NewID()
	}
	if s.file != "" {
		if err := WriteFileAtomic(s.idFile(), []byte(id+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("cluster node id file: %w", err)
		}
	}
	var t *Topology
	if s.file != "" {
		b, err := os.ReadFile(s.file)
		switch {
		case err == nil && len(strings.TrimSpace(string(b))) > 0:
			if t, err = Parse(b); err != nil {
				return nil, fmt.Errorf("cluster config file %s: %w", s.file, err)
			}
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("cluster config file: %w", err)
		}
	}
	s.view.Store(s.newView(t, id, Node{}))
	s.mu.Lock()
	s.syncMigrationsLocked()
	s.mu.Unlock()
	return s, nil
}

func (s *State) idFile() string { return s.file + ".myid" }

func (s *State) newView(t *Topology, id string, addr Node) *View {
	v := &View{T: t, ID: id, Addr: addr, builds: &s.builds}
	v.Me, v.Master = t.Find(id)
	v.over = s.mig.overrideLocked(v)
	return v
}

// View returns the current view.
func (s *State) View() *View { return s.view.Load() }

// RepliesBuilt returns how many replies this state's views have built
// (View.Reply): one per reply kind and protocol asked for, per view.
func (s *State) RepliesBuilt() int64 { return s.builds.Load() }

// MyID returns this node's id.
func (s *State) MyID() string { return s.view.Load().ID }

// SetAddr records the node's listening address (shown for a node the
// topology does not list).
func (s *State) SetAddr(ip string, port int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.view.Load()
	s.setView(s.newView(old.T, old.ID, Node{ID: old.ID, IP: ip, Port: port}))
}

// SetMyID changes this node's id (CELLCLUSTER MYID id). The node then
// finds itself in the topology by the new id; slots it no longer serves
// have their keys deleted in the background.
func (s *State) SetMyID(id string) error {
	if why := ValidID(id); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalidID, why)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != "" {
		if err := WriteFileAtomic(s.idFile(), []byte(id+"\n"), 0o600); err != nil {
			return err
		}
	}
	old := s.view.Load()
	nv := s.newView(old.T, id, old.Addr)
	s.setView(nv)
	s.dropLost(old, nv)
	s.syncMigrationsLocked()
	return nil
}

// Install validates nothing (Parse did) and makes t the topology: it is
// first written to the config file (when there is one), so that what is
// served is what a restart loads, then swapped in atomically. The keys of
// the slots this node no longer serves are deleted in the background.
func (s *State) Install(t *Topology) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != "" {
		if err := WriteFileAtomic(s.file, append(append([]byte(nil), t.raw...), '\n'), 0o600); err != nil {
			return err
		}
	}
	old := s.view.Load()
	nv := s.newView(t, old.ID, old.Addr)
	s.setView(nv)
	s.dropLost(old, nv)
	s.syncMigrationsLocked()
	return nil
}

// refreshLocked rebuilds the view of the same topology after a
// migration's state changed its overrides, and deletes the keys of the
// slots it no longer serves. s.mu held.
func (s *State) refreshLocked() {
	old := s.view.Load()
	nv := s.newView(old.T, old.ID, old.Addr)
	s.setView(nv)
	s.dropLost(old, nv)
}

// setView makes nv the current view and tells the watchers. s.mu must be
// held.
func (s *State) setView(nv *View) {
	s.view.Store(nv)
	for _, f := range s.watchers {
		f(nv)
	}
}

// OnChange registers f, called with every view installed from now on
// (CELLCLUSTER CONFIG, CELLCLUSTER MYID, the node's address at start), in
// the order they are installed, and once at once with the current view.
// f runs with the State's lock held: it must be quick and must not call
// Install, SetMyID, SetAddr or OnChange.
func (s *State) OnChange(f func(*View)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers = append(s.watchers, f)
	f(s.view.Load())
}

// dropLost queues the slots old owned and nv does not for deletion.
func (s *State) dropLost(old, nv *View) {
	if s.store == nil || old.Me == nil {
		return
	}
	var lost []uint16
	for slot := 0; slot < keyslot.Slots; slot++ {
		if old.Owns(uint16(slot)) && !nv.Owns(uint16(slot)) {
			lost = append(lost, uint16(slot))
		}
	}
	if len(lost) == 0 {
		return
	}
	s.dmu.Lock()
	defer s.dmu.Unlock()
	for _, slot := range lost {
		if !s.queued[slot] {
			s.queued[slot] = true
			s.pending = append(s.pending, slot)
		}
	}
	if !s.running {
		s.running = true
		s.idle = make(chan struct{})
		go s.deleteLoop()
	}
}

// deleteLoop deletes the pending slots one at a time (the store takes one
// shard lock at a time), skipping a slot the node serves again by then:
// its keys are live state once more.
func (s *State) deleteLoop() {
	total, slots := 0, 0
	for {
		s.dmu.Lock()
		if len(s.pending) == 0 {
			s.running = false
			close(s.idle)
			s.dmu.Unlock()
			if slots > 0 {
				s.log.Info("cluster: deleted the keys of slots this node no longer serves", "slots", slots, "keys", total)
			}
			return
		}
		if bs, ok := s.store.(batchDeleter); ok {
			// One pass over the keyspace for every pending slot.
			var set [keyslot.Slots]bool
			v := s.view.Load()
			for _, slot := range s.pending {
				s.queued[slot] = false
				if !v.Owns(slot) {
					set[slot] = true
					slots++
				}
			}
			s.pending = nil
			s.dmu.Unlock()
			n := bs.DeleteSlots(0, &set)
			s.deleted.Add(int64(n))
			total += n
			continue
		}
		slot := s.pending[0]
		s.pending = s.pending[1:]
		s.queued[slot] = false
		s.dmu.Unlock()
		if s.view.Load().Owns(slot) {
			continue
		}
		n := s.store.DeleteSlot(0, slot)
		s.deleted.Add(int64(n))
		total += n
		slots++
	}
}

// batchDeleter is a SlotStore that deletes many slots in one pass
// (KeyspaceStore: without the slot index, each call scans the database).
type batchDeleter interface {
	DeleteSlots(db int, slots *[keyslot.Slots]bool) int
}

// WaitDeletes blocks until no slot deletion is pending or ctx ends.
func (s *State) WaitDeletes(ctx context.Context) error {
	s.dmu.Lock()
	idle := s.idle
	s.dmu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DeletedKeys returns how many keys slot moves deleted so far.
func (s *State) DeletedKeys() int64 { return s.deleted.Load() }

// WriteFileAtomic replaces path with data, with permissions perm: a
// temporary file in the same directory is written and fsynced, renamed
// over path, and the directory fsynced, so a crash leaves the old file or
// the new one, never a mix. (cmd/cellserver's CONFIG REWRITE uses it too.)
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is synced.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
