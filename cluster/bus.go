package cluster

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The pub/sub bus: cluster-wide PUBLISH and shard-channel SPUBLISH, as
// Redis Cluster carries them on its cluster bus. A node keeps at most one
// outgoing link to every other node of the installed topology (masters and
// replicas); over it, it sends each message published on it as one
// internal command, "CELLCLUSTER PUBLISH channel message" (to every other
// node) or "CELLCLUSTER SPUBLISH channel message" (to the other nodes of
// its own shard, for a shard channel), in the order they were published.
// The receiving node delivers them to its own subscribers only; it never
// forwards them again, so a message reaches every node once.
//
// A link is an ordinary client connection to the other node's RESP port:
// it authenticates with Config.User and Config.Password (the node's
// masteruser/masterauth, else its requirepass) and uses TLS when
// Config.TLS is set (tls-replication). It is dialled when a topology
// naming the node is installed, redialled after a failure (after 100 ms,
// doubling to 5 s, back to 100 ms once connected), and closed when a
// topology no longer lists the node (or lists it at another address).
//
// # Limits
//
// Each link queues at most Config.QueueLimit bytes of encoded commands
// (DefaultBusQueueLimit, 32 MiB: twice the default proto-max-bulk-len, so
// that the largest message fits) while its writer is busy; a message that
// would pass that bound, a message longer than Config.MaxMessage
// (proto-max-bulk-len, which the receiving node's reader enforces too), and
// every message published while the link is not connected are dropped for
// that peer: counted (LinkStats.Dropped, INFO cluster) and logged at most
// once per 10 s per link. Messages queued when a link fails are dropped
// too. Pub/sub is at most once, as in Redis Cluster, which sends nothing
// to a node whose link is down. A node's memory for the bus is at most
// QueueLimit per other node of the topology.

// DefaultBusQueueLimit is the default bound, in bytes, of one link's queue
// (Config.QueueLimit, --cluster-pubsub-queue-limit).
const DefaultBusQueueLimit = 32 << 20

// Backoff between dial attempts of a link.
const (
	busRetryMin = 100 * time.Millisecond
	busRetryMax = 5 * time.Second
	// busDialTimeout bounds a dial and the handshake (AUTH, PING).
	busDialTimeout = 5 * time.Second
	// busLogEvery is the least time between two logged drop lines of a
	// link.
	busLogEvery = 10 * time.Second
	// busReplyLine bounds a reply line read on a link (":n", "+OK", an
	// error): longer ones end the link.
	busReplyLine = 4 << 10
)

// BusConfig configures a Bus.
type BusConfig struct {
	// State is the node's cluster state: the bus links to the other nodes
	// of every topology it installs.
	State *State
	// TLS, when set, is how links dial (tls-replication); nil: plain TCP.
	TLS *tls.Config
	// User and Password authenticate a link (AUTH [user] password);
	// Password "" sends no AUTH.
	User, Password string
	// QueueLimit bounds each link's queue in bytes; 0 means
	// DefaultBusQueueLimit.
	QueueLimit int64
	// MaxMessage bounds the channel and the message of a forwarded message,
	// each, in bytes (proto-max-bulk-len); 0: no bound of its own.
	MaxMessage int64
	// Logger receives the links' lines; nil: slog.Default().
	Logger *slog.Logger
	// Dial, when set, replaces the dialler (tests).
	Dial func(addr string) (net.Conn, error)
}

// Bus keeps the pub/sub links of a node. It is safe for concurrent use.
// The zero value is not usable: use NewBus.
type Bus struct {
	cfg BusConfig
	log *slog.Logger

	// all is the current set of links (every other node of the topology);
	// shard the subset in this node's shard. Both are replaced, never
	// modified, by reconcile.
	all   atomic.Pointer[[]*busLink]
	shard atomic.Pointer[[]*busLink]

	mu      sync.Mutex // guards links, started, closed
	links   map[string]*busLink
	started bool
	closed  bool
	last    *View // the latest view, applied by Start
}

// LinkStats describes one link, for INFO cluster and the metrics.
type LinkStats struct {
	ID, Addr string // the other node
	Up       bool   // connected and authenticated
	// Forwarded counts the messages written to the link; Dropped those
	// not sent to that node (queue full, too long, link down).
	Forwarded, Dropped int64
	QueuedBytes        int64 // bytes waiting in the queue now
}

// NewBus returns a bus for cfg.State; it links nothing until Start.
func NewBus(cfg BusConfig) *Bus {
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = DefaultBusQueueLimit
	}
	b := &Bus{cfg: cfg, log: cfg.Logger, links: map[string]*busLink{}}
	if b.log == nil {
		b.log = slog.Default()
	}
	if cfg.Dial == nil {
		b.cfg.Dial = b.dial
	}
	return b
}

// Start links the bus to the nodes of the installed topology, and from
// then on of every topology installed, until Close.
func (b *Bus) Start() {
	b.mu.Lock()
	if b.started || b.closed {
		b.mu.Unlock()
		return
	}
	b.started = true
	b.mu.Unlock()
	b.cfg.State.OnChange(b.apply)
}

// Close ends every link and stops following the topology. Messages still
// queued are dropped.
func (b *Bus) Close() {
	b.mu.Lock()
	b.closed = true
	links := b.links
	b.links = map[string]*busLink{}
	b.mu.Unlock()
	b.all.Store(nil)
	b.shard.Store(nil)
	for _, l := range links {
		l.stop()
	}
}

// apply makes the links follow view v: one per other node it lists.
func (b *Bus) apply(v *View) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.last = v
	want := map[string]Node{}
	inShard := map[string]bool{}
	if v.T != nil {
		for i := range v.T.Shards {
			sh := &v.T.Shards[i]
			for _, n := range append([]Node{sh.Master}, sh.Replicas...) {
				if n.ID == v.ID {
					continue
				}
				want[n.ID] = n
				if sh == v.Me {
					inShard[n.ID] = true
				}
			}
		}
	}
	for id, l := range b.links {
		if n, ok := want[id]; !ok || n.Addr() != l.addr {
			delete(b.links, id)
			l.stop()
		}
	}
	var all, shard []*busLink
	for id, n := range want {
		l := b.links[id]
		if l == nil {
			l = b.newLink(n)
			b.links[id] = l
			go l.run()
		}
		all = append(all, l)
		if inShard[id] {
			shard = append(shard, l)
		}
	}
	b.all.Store(&all)
	b.shard.Store(&shard)
}

// Publish forwards a PUBLISH to every other node of the topology.
func (b *Bus) Publish(channel, msg []byte) { b.forward(b.all.Load(), "PUBLISH", channel, msg) }

// SPublish forwards an SPUBLISH to the other nodes of this node's shard
// (its master and replicas), which serve the channel's slot.
func (b *Bus) SPublish(channel, msg []byte) { b.forward(b.shard.Load(), "SPUBLISH", channel, msg) }

func (b *Bus) forward(lp *[]*busLink, sub string, channel, msg []byte) {
	if lp == nil || len(*lp) == 0 {
		return
	}
	links := *lp
	if m := b.cfg.MaxMessage; m > 0 && (int64(len(channel)) > m || int64(len(msg)) > m) {
		for _, l := range links {
			l.drop(1, "message longer than proto-max-bulk-len")
		}
		return
	}
	cmd := appendCommand(nil, "CELLCLUSTER", sub, channel, msg)
	for _, l := range links {
		l.enqueue(cmd)
	}
}

// appendCommand encodes a RESP command of bulk strings (string or []byte).
func appendCommand(b []byte, args ...any) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		var s []byte
		switch a := a.(type) {
		case string:
			s = []byte(a)
		case []byte:
			s = a
		}
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, '\r', '\n')
		b = append(b, s...)
		b = append(b, '\r', '\n')
	}
	return b
}

// Links returns every link's state, by node id.
func (b *Bus) Links() []LinkStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]LinkStats, 0, len(b.links))
	for _, l := range b.links {
		out = append(out, l.stats())
	}
	sortLinks(out)
	return out
}

func sortLinks(l []LinkStats) {
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j].ID < l[j-1].ID; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
}

func (b *Bus) dial(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: busDialTimeout}
	if b.cfg.TLS != nil {
		return tls.DialWithDialer(&d, "tcp", addr, b.cfg.TLS)
	}
	return d.Dial("tcp", addr)
}

// busLink is the link to one other node.
type busLink struct {
	b        *Bus
	id, addr string
	quit     chan struct{}
	wake     chan struct{} // a message was queued (capacity 1)

	forwarded atomic.Int64
	dropped   atomic.Int64
	up        atomic.Bool // connected; changed with mu held

	mu     sync.Mutex // guards the fields below
	q      [][]byte   // encoded commands, in publishing order
	qBytes int64
	// logged is when drops were last logged; unlogged counts the drops
	// since.
	logged   time.Time
	unlogged int64
	why      string // the reason of the last drop
}

func (b *Bus) newLink(n Node) *busLink {
	return &busLink{b: b, id: n.ID, addr: n.Addr(), quit: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (l *busLink) stop() { close(l.quit) }

func (l *busLink) stats() LinkStats {
	l.mu.Lock()
	q := l.qBytes
	l.mu.Unlock()
	return LinkStats{ID: l.id, Addr: l.addr, Up: l.up.Load(), Forwarded: l.forwarded.Load(),
		Dropped: l.dropped.Load(), QueuedBytes: q}
}

// enqueue queues cmd for the link, or drops it when the link is down or
// its queue would pass the limit.
func (l *busLink) enqueue(cmd []byte) {
	l.mu.Lock()
	if !l.up.Load() {
		l.mu.Unlock()
		l.drop(1, "link down")
		return
	}
	if l.qBytes+int64(len(cmd)) > l.b.cfg.QueueLimit {
		l.mu.Unlock()
		l.drop(1, "queue full (cluster-pubsub-queue-limit)")
		return
	}
	l.q = append(l.q, cmd)
	l.qBytes += int64(len(cmd))
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// drop counts n messages not sent to this node, and logs them at most
// once per busLogEvery.
func (l *busLink) drop(n int64, why string) {
	l.dropped.Add(n)
	l.mu.Lock()
	l.unlogged += n
	l.why = why
	now := time.Now()
	if !l.logged.IsZero() && now.Sub(l.logged) < busLogEvery {
		l.mu.Unlock()
		return
	}
	count := l.unlogged
	l.unlogged, l.logged = 0, now
	l.mu.Unlock()
	l.b.log.Warn("cluster: pub/sub messages to a node dropped", "node", l.id, "addr", l.addr,
		"dropped", count, "reason", why, "dropped_total", l.dropped.Load())
}

// take removes and returns everything queued.
func (l *busLink) take() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.q
	l.q, l.qBytes = nil, 0
	return q
}

// setUp marks the link connected or not; going down, it returns what was
// queued (nothing is queued while it is down).
func (l *busLink) setUp(up bool) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up.Store(up)
	if up {
		return nil
	}
	q := l.q
	l.q, l.qBytes = nil, 0
	return q
}

// run connects the link and writes its queue until stop.
func (l *busLink) run() {
	retry := busRetryMin
	for {
		select {
		case <-l.quit:
			return
		default:
		}
		err := l.session(&retry)
		if q := l.setUp(false); len(q) > 0 {
			l.drop(int64(len(q)), "link failed")
		}
		select {
		case <-l.quit:
			return
		default:
		}
		l.b.log.Warn("cluster: pub/sub link down; retrying", "node", l.id, "addr", l.addr, "err", err, "retry", retry.String())
		select {
		case <-l.quit:
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, busRetryMax)
	}
}

var errBusStopped = errors.New("cluster: pub/sub link stopped")

// session dials, authenticates and writes the queue until the
// connection fails or the link stops.
func (l *busLink) session(retry *time.Duration) error {
	nc, err := l.b.cfg.Dial(l.addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	// A stop closes the connection, which ends the reads and writes below.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-l.quit:
			nc.Close()
		case <-done:
		}
	}()
	br := bufio.NewReaderSize(nc, busReplyLine)
	nc.SetDeadline(time.Now().Add(busDialTimeout))
	var hs []byte
	n := 1
	if p := l.b.cfg.Password; p != "" {
		if u := l.b.cfg.User; u != "" {
			hs = appendCommand(hs, "AUTH", u, p)
		} else {
			hs = appendCommand(hs, "AUTH", p)
		}
		n++
	}
	hs = appendCommand(hs, "PING")
	if _, err := nc.Write(hs); err != nil {
		return err
	}
	for range n {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		if strings.HasPrefix(line, "-") {
			return fmt.Errorf("handshake: %s", line[1:])
		}
	}
	nc.SetDeadline(time.Time{})
	l.setUp(true)
	*retry = busRetryMin
	l.b.log.Info("cluster: pub/sub link up", "node", l.id, "addr", l.addr)
	// The replies (":n", the local receivers there) are read and dropped;
	// an error reply (an older node without CELLCLUSTER PUBLISH, a lost
	// AUTH) is logged, and a failed read ends the session.
	rerr := make(chan error, 1)
	go func() {
		var logged time.Time
		for {
			line, err := readLine(br)
			if err != nil {
				rerr <- err
				nc.Close()
				return
			}
			if strings.HasPrefix(line, "-") && time.Since(logged) >= busLogEvery {
				logged = time.Now()
				l.b.log.Warn("cluster: pub/sub link: the node refused a forwarded message", "node", l.id, "addr", l.addr, "reply", line[1:])
			}
		}
	}()
	bufs := net.Buffers{}
	for {
		select {
		case <-l.quit:
			return errBusStopped
		case err := <-rerr:
			return err
		case <-l.wake:
		}
		q := l.take()
		if len(q) == 0 {
			continue
		}
		bufs = append(bufs[:0], q...)
		if _, err := bufs.WriteTo(nc); err != nil {
			l.drop(int64(len(q)), "write failed")
			return err
		}
		l.forwarded.Add(int64(len(q)))
	}
}

// readLine reads one reply line (without CRLF), at most busReplyLine
// bytes. Bulk replies are not expected on a link.
func readLine(br *bufio.Reader) (string, error) {
	raw, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return "", errors.New("cluster: pub/sub link: reply line too long")
	}
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(raw), "\r\n"), nil
}
