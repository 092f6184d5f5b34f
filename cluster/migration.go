package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
)

// Slot migration: a topology declares, on a source shard, migrations of
// some of its slots to another shard's master (Shard.Migrations,
// Dragonfly's format). The source's master streams the keys of those
// slots, with their whole state, to the target, then every later change
// to them; once the target has caught up, the source hands the slots
// over: it holds their writes (TRYAGAIN) for as long as it takes the
// target to apply the last changes, and from then on answers MOVED to the
// target for them, which serves them from then on, before the closing
// topology (which gives the target the slots) arrives. No key is served
// by both nodes at once, and none loses its state.
//
// The stream is plain commands on an authenticated client connection to
// the target, each answered +OK in order:
//
//	CELLCLUSTER MIGRATE-START <source id> <attempt>   the target drops what an earlier attempt left
//	CELLCLUSTER MIGRATE-PUT <source id> <key> <value> a key's state (persistence.EncodeValue)
//	CELLCLUSTER MIGRATE-DEL <source id> <key>         a key deleted since
//	CELLCLUSTER MIGRATE-END <source id> <keys>        everything is sent: the target takes the slots
//
// States (SLOT-MIGRATION-STATUS): CONNECTING, SYNC, FINISHED, ERROR (the
// attempt failed; a new one starts from scratch after retryDelay), FATAL
// (the target refused for good: out of memory; it dropped the keys).

// Migration states.
const (
	MigConnecting = "CONNECTING"
	MigSync       = "SYNC"
	MigFinished   = "FINISHED"
	MigError      = "ERROR"
	MigFatal      = "FATAL"
)

// ErrUnknownMigration is the target's answer to a source it expects no
// migration from (its topology has not declared it yet): the source
// retries.
var ErrUnknownMigration = errors.New("UNKNOWN_MIGRATION the target's topology declares no migration from this source")

// fatalPrefix starts an error that ends a migration for good.
const fatalPrefix = "FATAL "

// MigrationConfig is what slot migrations need (Config.Migrations).
type MigrationConfig struct {
	// Keyspace holds the keys to send (source) or receive (target).
	Keyspace *keyspace.Keyspace
	// Dial connects to a target ("ip:port"); nil: plain TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// User and Password authenticate the source to the target (AUTH);
	// empty Password: none.
	User, Password string
	// MaxQueue bounds, in bytes, the changes queued for a target that
	// has not taken them yet; past it the attempt fails (ERROR) and the
	// next starts from scratch. The default value is DefaultMigrationQueue.
	MaxQueue int64
}

// DefaultMigrationQueue is the default MigrationConfig.MaxQueue: 64 MiB.
const DefaultMigrationQueue = 64 << 20

// retryDelay is the pause between two attempts of a migration.
const retryDelay = 500 * time.Millisecond

// linkTimeout bounds connecting to a target and each wait for its
// answers.
const linkTimeout = 10 * time.Second

// maxInFlight bounds the commands sent to a target and not yet answered.
const maxInFlight = 20000

// migrations is a State's slot migrations: out of this node (it is the
// source's master) and into it (the target).
type migrations struct {
	cfg       MigrationConfig
	mu        sync.Mutex         // guards the maps and the entries' states
	out       map[string]*outMig // by target id
	in        map[string]*inMig  // by source id
	active    atomic.Int32
	finished  int64         // guarded by mu
	lastPause time.Duration // guarded by mu
	keysSent  atomic.Int64
	closed    bool                      // Close: no migration starts (guarded by mu)              // len(out): commands check their slots again under their locks
	capturing atomic.Pointer[[]*outMig] // the outgoing migrations capturing changes
}

func (m *migrations) init(cfg MigrationConfig) {
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMigrationQueue
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: linkTimeout}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	m.cfg = cfg
	m.out = map[string]*outMig{}
	m.in = map[string]*inMig{}
}

// outMig is a migration out of this node.
type outMig struct {
	s      *State
	m      Migration
	slots  *SlotSet
	ranges string
	stop   chan struct{}

	// Guarded by migrations.mu.
	state, err       string
	frozen, finished bool
	keys             int64
	pause            time.Duration

	// The changes captured for the target (journal), in order.
	qmu    sync.Mutex
	q      [][]byte
	qBytes int64
	qOn    bool
	qOver  bool
	qc     chan struct{} // a change was queued
}

// inMig is a migration into this node.
type inMig struct {
	source   string
	ranges   []SlotRange
	slots    *SlotSet
	state    string
	err      string
	keys     int64
	conn     int64 // the connection of the attempt under way (0: none)
	finished bool
}

// Migrating reports whether this node has migrations out of it: commands
// that write then check their slots again under their shard locks
// (StillServes).
func (s *State) Migrating() bool { return s.mig.active.Load() > 0 }

// StillServes is the check a write makes under its shard locks while
// migrations are out of this node: whether slot is frozen (being handed
// over: TRYAGAIN) and, if not, whether this node still serves it (else
// owner is where it went). The route a command took before its locks may
// be older than a handover.
func (s *State) StillServes(slot uint16, readonlyClient bool) (frozen bool, owner *Shard, ok bool) {
	v := s.View()
	if v.Frozen(slot) {
		return true, nil, false
	}
	owner, ok = v.Route(slot, readonlyClient, true)
	return false, owner, ok
}

// override is a view's change to its topology's owners (View.over).
type override struct {
	owner  [keyslot.Slots]*Shard
	frozen SlotSet
}

// overrideLocked returns the overrides of view v from the migrations'
// states: slots handed over to a target (owned by it), slots received
// (owned by this node) and slots being handed over (frozen). s.mu held.
func (m *migrations) overrideLocked(v *View) *override {
	m.mu.Lock()
	defer m.mu.Unlock()
	var o *override
	get := func() *override {
		if o == nil {
			o = &override{}
		}
		return o
	}
	for _, om := range m.out {
		switch {
		case om.finished:
			if target, _ := v.T.Find(om.m.NodeID); target != nil {
				ov := get()
				for s := range om.slots {
					if om.slots[s] {
						ov.owner[s] = target
					}
				}
			}
		case om.frozen:
			ov := get()
			for s := range om.slots {
				ov.frozen[s] = ov.frozen[s] || om.slots[s]
			}
		}
	}
	if v.Me != nil && v.Master {
		for _, im := range m.in {
			if im.finished {
				ov := get()
				for s := range im.slots {
					if im.slots[s] {
						ov.owner[s] = v.Me
					}
				}
			}
		}
	}
	return o
}

// syncMigrationsLocked starts the migrations the installed topology
// declares and this node takes part in, and ends those it no longer
// declares. s.mu held.
func (s *State) syncMigrationsLocked() {
	v := s.view.Load()
	m := &s.mig
	wantOut := map[string]Migration{}
	wantIn := map[string]Migration{}
	inRanges := map[string][]SlotRange{}
	if v.T != nil && v.Master && v.Me != nil {
		for _, mg := range v.Me.Migrations {
			wantOut[mg.NodeID] = mg
		}
		for i := range v.T.Shards {
			sh := &v.T.Shards[i]
			for _, mg := range sh.Migrations {
				if mg.NodeID == v.ID {
					wantIn[sh.Master.ID] = mg
					inRanges[sh.Master.ID] = mg.SlotRanges
				}
			}
		}
	}
	changed := false
	var partial []*SlotSet
	m.mu.Lock()
	for id, om := range m.out {
		if want, ok := wantOut[id]; ok && sameRanges(want.SlotRanges, om.m.SlotRanges) && want.IP == om.m.IP && want.Port == om.m.Port {
			continue
		}
		close(om.stop)
		delete(m.out, id)
		changed = changed || om.finished || om.frozen
		s.log.Info("cluster: slot migration no longer declared: ended", "target", id, "slots", om.ranges, "state", om.state)
	}
	for id, mg := range wantOut {
		if _, ok := m.out[id]; ok || m.closed {
			continue
		}
		om := &outMig{s: s, m: mg, slots: Set(mg.SlotRanges), ranges: RangesString(mg.SlotRanges),
			stop: make(chan struct{}), state: MigConnecting, qc: make(chan struct{}, 1)}
		m.out[id] = om
		s.log.Info("cluster: slot migration out starts", "target", id, "addr", net.JoinHostPort(mg.IP, strconv.Itoa(mg.Port)), "slots", om.ranges)
		go om.run()
	}
	for src, im := range m.in {
		if r, ok := inRanges[src]; ok && sameRanges(r, im.ranges) {
			continue
		}
		delete(m.in, src)
		changed = changed || im.finished
		if !im.finished {
			partial = append(partial, im.slots)
		}
	}
	for src, mg := range wantIn {
		if _, ok := m.in[src]; !ok {
			m.in[src] = &inMig{source: src, ranges: mg.SlotRanges, slots: Set(mg.SlotRanges), state: MigConnecting}
		}
	}
	m.active.Store(int32(len(m.out)))
	m.publishCaptureLocked()
	m.mu.Unlock()
	if changed {
		s.refreshLocked()
	}
	for _, set := range partial {
		s.dropPartial(set)
	}
}

func sameRanges(a, b []SlotRange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// dropPartial deletes the keys an unfinished migration into this node
// left in slots it does not serve.
func (s *State) dropPartial(set *SlotSet) {
	ks := s.mig.cfg.Keyspace
	if ks == nil {
		return
	}
	v := s.View()
	var del [keyslot.Slots]bool
	some := false
	for slot := range set {
		if set[slot] && !v.Owns(uint16(slot)) {
			del[slot], some = true, true
		}
	}
	if some {
		if n := ks.DeleteSlots(0, &del); n > 0 {
			s.log.Info("cluster: dropped the keys of an unfinished migration into this node", "keys", n)
		}
	}
}

// publishCaptureLocked refreshes the list the journal reads. m.mu held.
func (m *migrations) publishCaptureLocked() {
	var l []*outMig
	for _, om := range m.out {
		l = append(l, om)
	}
	m.capturing.Store(&l)
}

// Journal returns the keyspace.Journal that captures, for each migration
// out of this node under way, the changes to its slots, to send them to
// the target after the keys' state. The keyspace's owner puts it in the
// journal chain (server.New).
func (s *State) Journal() keyspace.Journal { return migJournal{s} }

type migJournal struct{ s *State }

func (j migJournal) Put(db int, key []byte, v *keyspace.Value) {
	if j.s.mig.active.Load() == 0 || db != 0 {
		return
	}
	j.s.mig.capture(key, v)
}

func (j migJournal) Delete(db int, key []byte) {
	if j.s.mig.active.Load() == 0 || db != 0 {
		return
	}
	j.s.mig.capture(key, nil)
}

func (j migJournal) DeleteDB(db int) {
	if db == 0 {
		j.DeleteAll()
	}
}

func (j migJournal) DeleteAll() {
	if j.s.mig.active.Load() == 0 {
		return
	}
	if p := j.s.mig.capturing.Load(); p != nil {
		for _, om := range *p {
			om.overflow() // the target must start again: nothing is left
		}
	}
}

// capture queues a change of key (v nil: deleted) for the migrations
// whose slots hold it.
func (m *migrations) capture(key []byte, v *keyspace.Value) {
	p := m.capturing.Load()
	if p == nil {
		return
	}
	slot := keyslot.Of(key)
	for _, om := range *p {
		if om.slots[slot] {
			om.enqueue(key, v)
		}
	}
}

func (om *outMig) enqueue(key []byte, v *keyspace.Value) {
	om.qmu.Lock()
	defer om.qmu.Unlock()
	if !om.qOn || om.qOver {
		return
	}
	var b []byte
	if v != nil {
		b = om.appendPut(nil, key, *v)
	} else {
		b = om.appendCmd(nil, "MIGRATE-DEL", key)
	}
	om.q = append(om.q, b)
	om.qBytes += int64(len(b))
	if om.qBytes > om.s.mig.cfg.MaxQueue {
		om.qOver = true
		om.q, om.qBytes = nil, 0
	}
	select {
	case om.qc <- struct{}{}:
	default:
	}
}

// overflow fails the attempt under way: its queue cannot carry what
// happened (past MaxQueue, or a flush).
func (om *outMig) overflow() {
	om.qmu.Lock()
	if om.qOn {
		om.qOver = true
		om.q, om.qBytes = nil, 0
	}
	om.qmu.Unlock()
	select {
	case om.qc <- struct{}{}:
	default:
	}
}

// take returns the queued changes, and whether the queue overflowed.
func (om *outMig) take() ([][]byte, bool) {
	om.qmu.Lock()
	defer om.qmu.Unlock()
	q, over := om.q, om.qOver
	om.q, om.qBytes = nil, 0
	return q, over
}

func (om *outMig) setCapture(on bool) {
	om.qmu.Lock()
	om.qOn, om.qOver = on, false
	om.q, om.qBytes = nil, 0
	om.qmu.Unlock()
}

func (om *outMig) appendCmd(b []byte, sub string, args ...[]byte) []byte {
	b = redcon.AppendArray(b, 3+len(args))
	b = redcon.AppendBulkString(b, "CELLCLUSTER")
	b = redcon.AppendBulkString(b, sub)
	b = redcon.AppendBulkString(b, om.s.MyID())
	for _, a := range args {
		b = redcon.AppendBulk(b, a)
	}
	return b
}

func (om *outMig) appendPut(b []byte, key []byte, v keyspace.Value) []byte {
	return om.appendCmd(b, "MIGRATE-PUT", key, persistence.EncodeValue(nil, v))
}

// setState records the state (and error) SLOT-MIGRATION-STATUS shows.
func (om *outMig) setState(state, err string) {
	m := &om.s.mig
	m.mu.Lock()
	om.state, om.err = state, err
	m.mu.Unlock()
}

func (om *outMig) stopped() bool {
	select {
	case <-om.stop:
		return true
	default:
		return false
	}
}

// run makes attempts until one finishes, the migration is no longer
// declared, or the target refuses it for good.
func (om *outMig) run() {
	log := om.s.log.With("target", om.m.NodeID, "slots", om.ranges)
	for attempt := 1; ; attempt++ {
		err := om.attempt(attempt)
		om.setCapture(false)
		switch {
		case err == nil:
			return
		case om.stopped():
			om.unfreeze()
			return
		case strings.HasPrefix(err.Error(), fatalPrefix):
			om.unfreeze()
			om.setState(MigFatal, err.Error())
			log.Error("cluster: slot migration failed for good", "err", err)
			return
		}
		om.unfreeze()
		om.setState(MigError, err.Error())
		log.Warn("cluster: slot migration attempt failed; retrying from scratch", "attempt", attempt, "err", err, "retry_in", retryDelay)
		select {
		case <-om.stop:
			return
		case <-time.After(retryDelay):
		}
	}
}

// unfreeze lets the slots' writes through again after a handover that
// did not complete.
func (om *outMig) unfreeze() {
	s := om.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mig.mu.Lock()
	was := om.frozen
	om.frozen = false
	s.mig.mu.Unlock()
	if was {
		s.refreshLocked()
	}
}

// link is the source's connection to a target: commands written in
// order, their answers read by a goroutine that counts them.
type link struct {
	nc    net.Conn
	bw    *bufio.Writer
	sent  int64
	acked atomic.Int64
	errc  chan error // the first error answer or read failure
	ackc  chan struct{}
}

func (l *link) write(b []byte) error {
	l.nc.SetWriteDeadline(time.Now().Add(linkTimeout))
	_, err := l.bw.Write(b)
	return err
}

func (l *link) flush() error {
	l.nc.SetWriteDeadline(time.Now().Add(linkTimeout))
	return l.bw.Flush()
}

// readAnswers reads the target's answers: each +OK counts; an error ends
// the link.
func (l *link) readAnswers(br *bufio.Reader) {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			l.errc <- err
			return
		}
		line = strings.TrimRight(line, "\r\n")
		if !strings.HasPrefix(line, "+") {
			l.errc <- errors.New(strings.TrimPrefix(line, "-"))
			return
		}
		l.acked.Add(1)
		select {
		case l.ackc <- struct{}{}:
		default:
		}
	}
}

// wait waits until at most max commands are unanswered.
func (l *link) wait(max int64, stop <-chan struct{}) error {
	t := time.NewTimer(linkTimeout)
	defer t.Stop()
	for l.sent-l.acked.Load() > max {
		select {
		case err := <-l.errc:
			return err
		case <-l.ackc:
		case <-stop:
			return errors.New("migration no longer declared")
		case <-t.C:
			return fmt.Errorf("the target answered nothing for %v", linkTimeout)
		}
	}
	select {
	case err := <-l.errc:
		return err
	default:
		return nil
	}
}

// throttle waits, once more than maxInFlight commands are unanswered,
// until half of them are.
func (l *link) throttle(stop <-chan struct{}) error {
	if l.sent-l.acked.Load() <= maxInFlight {
		return nil
	}
	if err := l.flush(); err != nil {
		return err
	}
	return l.wait(maxInFlight/2, stop)
}

// send writes commands b (n of them).
func (l *link) send(b []byte, n int) error {
	l.sent += int64(n)
	return l.write(b)
}

// handshake sends one command and reads its answer synchronously.
func handshake(nc net.Conn, br *bufio.Reader, args ...string) error {
	var b []byte
	b = redcon.AppendArray(b, len(args))
	for _, a := range args {
		b = redcon.AppendBulkString(b, a)
	}
	nc.SetDeadline(time.Now().Add(linkTimeout))
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(b); err != nil {
		return err
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "+") {
		return errors.New(strings.TrimPrefix(line, "-"))
	}
	return nil
}

// attempt runs one attempt: connect, send every key of the slots and the
// changes since, hand over. nil: FINISHED.
func (om *outMig) attempt(attempt int) error {
	s := om.s
	cfg := &s.mig.cfg
	om.setState(MigConnecting, "")
	if cfg.Keyspace == nil {
		return errors.New("no keyspace to migrate")
	}
	addr := net.JoinHostPort(om.m.IP, strconv.Itoa(om.m.Port))
	ctx, cancel := context.WithTimeout(context.Background(), linkTimeout)
	nc, err := cfg.Dial(ctx, addr)
	cancel()
	if err != nil {
		return err
	}
	defer nc.Close()
	go func() { // a migration no longer declared drops its link
		<-om.stop
		nc.Close()
	}()
	br := bufio.NewReaderSize(nc, 4096)
	if cfg.Password != "" {
		args := []string{"AUTH", cfg.Password}
		if cfg.User != "" {
			args = []string{"AUTH", cfg.User, cfg.Password}
		}
		if err := handshake(nc, br, args...); err != nil {
			return fmt.Errorf("AUTH: %w", err)
		}
	}
	if err := handshake(nc, br, "CELLCLUSTER", "MIGRATE-START", s.MyID(), strconv.Itoa(attempt)); err != nil {
		return err
	}
	om.setState(MigSync, "")
	l := &link{nc: nc, bw: bufio.NewWriterSize(nc, 256<<10), errc: make(chan error, 1), ackc: make(chan struct{}, 1)}
	go l.readAnswers(br)
	om.setCapture(true)
	var keys int64
	count := func(n int) {
		keys += int64(n)
		s.mig.keysSent.Add(int64(n))
		s.mig.mu.Lock()
		om.keys = keys
		s.mig.mu.Unlock()
	}
	// drain sends the changes queued so far.
	drain := func() error {
		q, over := om.take()
		if over {
			return fmt.Errorf("more than %d bytes of changes queued for the target", cfg.MaxQueue)
		}
		for _, b := range q {
			if err := l.send(b, 1); err != nil {
				return err
			}
			if err := l.throttle(om.stop); err != nil {
				return err
			}
		}
		count(len(q))
		return nil
	}
	// The keys' state, shard by shard, each locked while its keys are
	// encoded; changes made meanwhile are queued and sent after the
	// shard: every change carries a key's whole state, so the target ends
	// with each key's last one (replication's full copy works so too).
	db := cfg.Keyspace.DB(0)
	var buf []byte
	for i := 0; i < db.NumShards(); i++ {
		sh := db.ShardAt(i)
		n := 0
		sh.Lock()
		sh.RangeSlots((*[keyslot.Slots]bool)(om.slots), func(key []byte, v *keyspace.Value) bool {
			buf = om.appendPut(buf, key, *v)
			n++
			return true
		})
		sh.Unlock()
		if n > 0 {
			if err := l.send(buf, n); err != nil {
				return err
			}
			buf = buf[:0]
			count(n)
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
		if err := drain(); err != nil {
			return err
		}
		if err := l.throttle(om.stop); err != nil {
			return err
		}
		if om.stopped() {
			return errors.New("migration no longer declared")
		}
	}
	// Catch up: the target has applied everything sent.
	if err := drain(); err != nil {
		return err
	}
	if err := l.flush(); err != nil {
		return err
	}
	if err := l.wait(0, om.stop); err != nil {
		return err
	}
	// Hand over. Freeze the slots' writes; once every command that
	// passed its route before the freeze has left its shard locks (the
	// barrier), nothing else can change them: send what is queued and the
	// end, which the target answers once it serves the slots.
	start := time.Now()
	if !om.setFrozen() {
		return errors.New("migration no longer declared")
	}
	cfg.Keyspace.LockAll()
	cfg.Keyspace.UnlockAll()
	if err := drain(); err != nil {
		return err
	}
	om.setCapture(false)
	if err := l.send(om.appendCmd(nil, "MIGRATE-END", []byte(strconv.FormatInt(keys, 10))), 1); err != nil {
		return err
	}
	if err := l.flush(); err != nil {
		return err
	}
	if err := l.wait(0, om.stop); err != nil {
		return err
	}
	pause := time.Since(start)
	if !om.finish(pause) {
		return errors.New("migration no longer declared")
	}
	s.log.Info("cluster: slot migration finished: the target serves the slots", "target", om.m.NodeID, "slots", om.ranges,
		"keys", keys, "attempt", attempt, "handover_pause", pause.Round(time.Microsecond))
	return nil
}

// setFrozen freezes the slots' writes; false if the migration is no
// longer declared.
func (om *outMig) setFrozen() bool {
	return om.update(func() { om.frozen = true })
}

// finish records the handover: the slots are the target's from now on
// (MOVED), and their keys here are deleted.
func (om *outMig) finish(pause time.Duration) bool {
	return om.update(func() {
		om.frozen, om.finished = false, true
		om.state, om.err, om.pause = MigFinished, "", pause
		om.s.mig.finished++
		om.s.mig.lastPause = pause
	})
}

// update applies f to the migration, if it is still declared, and
// rebuilds the view from its new state; false if it is not.
func (om *outMig) update(f func()) bool {
	s := om.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mig.mu.Lock()
	if s.mig.out[om.m.NodeID] != om {
		s.mig.mu.Unlock()
		return false
	}
	f()
	s.mig.mu.Unlock()
	s.refreshLocked()
	return true
}

// Close ends the migrations out of this node (at shutdown): each stops
// its attempt; the slots stay this node's unless handed over already.
// Later topologies start none.
func (s *State) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &s.mig
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for id, om := range m.out {
		close(om.stop)
		delete(m.out, id)
	}
	m.active.Store(0)
	m.publishCaptureLocked()
}

// MigrateStart begins an attempt of the migration from source on
// connection conn (CELLCLUSTER MIGRATE-START): the keys an earlier attempt
// left are dropped.
func (s *State) MigrateStart(source string, conn int64) error {
	m := &s.mig
	m.mu.Lock()
	im := m.in[source]
	switch {
	case im == nil:
		m.mu.Unlock()
		return ErrUnknownMigration
	case im.finished:
		m.mu.Unlock()
		return errors.New(fatalPrefix + "the migration from this source is finished already")
	}
	im.state, im.err, im.keys, im.conn = MigSync, "", 0, conn
	set := im.slots
	m.mu.Unlock()
	s.dropPartial(set)
	return nil
}

// incoming returns the migration from source under way on conn.
func (m *migrations) incoming(source string, conn int64) (*inMig, error) {
	im := m.in[source]
	if im == nil || im.conn != conn || im.state != MigSync {
		return nil, ErrUnknownMigration
	}
	return im, nil
}

// MigratePut applies one key's state from source (CELLCLUSTER
// MIGRATE-PUT): value is persistence.EncodeValue's encoding. Out of memory
// (maxmemory), the migration fails for good and its keys are dropped.
func (s *State) MigratePut(source string, conn int64, key, value []byte) error {
	m := &s.mig
	ks := m.cfg.Keyspace
	m.mu.Lock()
	im, err := m.incoming(source, conn)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	if !im.slots[keyslot.Of(key)] {
		m.mu.Unlock()
		return fmt.Errorf("key %q is not in the slots migrating from this source", key)
	}
	m.mu.Unlock()
	v, err := persistence.DecodeValueOwned(value)
	if err != nil {
		return fmt.Errorf("bad value for %q: %w", key, err)
	}
	sh := ks.DB(0).Shard(key)
	sh.Lock()
	if !ks.CanInsert() {
		sh.Unlock()
		m.mu.Lock()
		im.state, im.err, im.conn = MigFatal, "out of memory (maxmemory)", 0
		set := im.slots
		m.mu.Unlock()
		s.log.Error("cluster: slot migration into this node failed for good: out of memory; dropping its keys", "source", source)
		s.dropPartial(set)
		return errors.New(fatalPrefix + "the target is out of memory (maxmemory)")
	}
	sh.Set(key, v)
	sh.Unlock()
	m.mu.Lock()
	im.keys++
	m.mu.Unlock()
	return nil
}

// MigrateDel deletes a key the source deleted (CELLCLUSTER MIGRATE-DEL).
func (s *State) MigrateDel(source string, conn int64, key []byte) error {
	m := &s.mig
	m.mu.Lock()
	_, err := m.incoming(source, conn)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	sh := m.cfg.Keyspace.DB(0).Shard(key)
	sh.Lock()
	sh.Delete(key, 0)
	sh.Unlock()
	return nil
}

// MigrateEnd completes the migration from source (CELLCLUSTER
// MIGRATE-END): every key was applied, in order, on this connection, so
// this node serves the slots from now on, ahead of the closing topology.
func (s *State) MigrateEnd(source string, conn int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &s.mig
	m.mu.Lock()
	im, err := m.incoming(source, conn)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	im.state, im.finished, im.conn = MigFinished, true, 0
	keys := im.keys
	m.mu.Unlock()
	s.refreshLocked()
	s.log.Info("cluster: slot migration into this node finished: serving the slots", "source", source,
		"slots", RangesString(im.ranges), "keys", keys)
	return nil
}

// MigrateClosed tells that connection conn ended: a migration it carried
// and did not finish fails, and its keys are dropped (the source starts
// again from scratch, if it is still there).
func (s *State) MigrateClosed(source string, conn int64) {
	m := &s.mig
	m.mu.Lock()
	im := m.in[source]
	if im == nil || im.conn != conn || im.finished {
		m.mu.Unlock()
		return
	}
	im.state, im.err, im.conn = MigError, "the source's connection ended before the handover", 0
	set := im.slots
	m.mu.Unlock()
	s.log.Warn("cluster: slot migration into this node interrupted: the source's connection ended; dropping its keys", "source", source)
	s.dropPartial(set)
}

// MigrationStats are the figures INFO cluster shows.
type MigrationStats struct {
	Out, In   int           // migrations declared out of and into this node
	Finished  int64         // migrations out of this node finished since start
	KeysSent  int64         // keys' states and changes sent to targets since start
	LastPause time.Duration // the last handover's pause of the migrating slots' writes
}

// MigrationStats returns the node's migration figures.
func (s *State) MigrationStats() MigrationStats {
	m := &s.mig
	m.mu.Lock()
	defer m.mu.Unlock()
	return MigrationStats{Out: len(m.out), In: len(m.in), Finished: m.finished, KeysSent: m.keysSent.Load(), LastPause: m.lastPause}
}

// MigrationStatus is one line of CELLCLUSTER SLOT-MIGRATION-STATUS.
type MigrationStatus struct {
	Direction string // "out" (this node is the source) or "in"
	Peer      string // the other node's id
	State     string
	Keys      int64
	Error     string
	Slots     string // "a-b,c-d"
}

// Migrations returns the node's migrations (with peer, only those with
// that node), outgoing first, each list by peer id.
func (s *State) Migrations(peer string) []MigrationStatus {
	m := &s.mig
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []MigrationStatus
	for id, om := range m.out {
		if peer == "" || peer == id {
			out = append(out, MigrationStatus{"out", id, om.state, om.keys, om.err, om.ranges})
		}
	}
	for id, im := range m.in {
		if peer == "" || peer == id {
			out = append(out, MigrationStatus{"in", id, im.state, im.keys, im.err, RangesString(im.ranges)})
		}
	}
	sortStatus(out)
	return out
}

func sortStatus(l []MigrationStatus) {
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && (l[j].Direction > l[j-1].Direction || l[j].Direction == l[j-1].Direction && l[j].Peer < l[j-1].Peer); j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
}
