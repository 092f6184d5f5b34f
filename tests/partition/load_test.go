package partition

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The load: workers goroutines sharing one go-redis FailoverClient, each
// sending one command at a time, paced so that together they ask each of
// keys keys for about twice its limit.
const (
	workers        = 32
	keys           = 20
	loadClientName = "partition-load"
)

// outcome is what a client saw of one command.
type outcome uint8

const (
	admitted outcome = iota
	refused
	failed // an error: the client does not know whether it was admitted
)

// reply is one command's record: when it was sent and its reply read
// (Unix ns, the wall clock every namespace shares with the servers), and
// what came back.
type reply struct {
	key        int
	send, recv int64
	outcome    outcome
	remaining  int64  // field 3 of the reply
	resetAfter int64  // field 5: ms with CL.FIXED ... MS, s with CL.THROTTLE
	err        string // the error's kind (errKind), for failed
}

// load runs the workers until stop and keeps every reply.
type load struct {
	lim   limit
	start time.Time

	mu      sync.Mutex // guards replies
	replies []reply

	admittedKeys [keys]atomic.Int64 // admissions per key
	refusedKeys  [keys]atomic.Int64 // refusals per key
	cancel       context.CancelFunc
	done         chan struct{}
}

// startLoad starts the workers on fc: each sends lim's command on key
// n%keys for the n-th command of all, one every workers/(2*keys*rate).
// With wait > 0 each command goes with WAIT 1 wait (see send).
func startLoad(fc *redis.Client, lim limit, wait time.Duration) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{lim: lim, start: time.Now(), cancel: cancel, done: make(chan struct{})}
	// Twice the limit on every key: 2*keys*rate commands per second in
	// all, so each worker sends one every workers/(2*keys*rate) s.
	every := time.Duration(float64(time.Second) * workers / (2 * keys * lim.rate()))
	var seq atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := l.start.Add(every * time.Duration(w) / workers)
			var mine []reply
			defer func() {
				l.mu.Lock()
				l.replies = append(l.replies, mine...)
				l.mu.Unlock()
			}()
			for {
				if d := time.Until(next); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
				if ctx.Err() != nil {
					return
				}
				next = next.Add(every)
				if now := time.Now(); next.Before(now) {
					next = now // late (a stalled command): do not burst to catch up
				}
				key := int(seq.Add(1)-1) % keys
				r := reply{key: key, send: time.Now().UnixNano()}
				vals, acked, werr, err := send(ctx, fc, lim.args(key), wait)
				r.recv = time.Now().UnixNano()
				switch {
				case (errors.Is(err, context.Canceled) || errors.Is(werr, context.Canceled)) && ctx.Err() != nil:
					return // the load stopped: no reply to record
				case err != nil:
					r.outcome, r.err = failed, errKind(err)
				case len(vals) != 5:
					r.outcome, r.err = failed, fmt.Sprintf("reply of %d integers", len(vals))
				default:
					r.remaining, r.resetAfter = vals[2], vals[4]
					r.outcome = refused
					switch {
					case vals[0] != 0:
						l.refusedKeys[key].Add(1)
					case werr != nil:
						r.outcome, r.err = failed, errKind(werr) // admitted, unconfirmed
					case wait > 0 && acked < 1:
						// Admitted by the primary, but no replica confirmed
						// it: the client refuses it, not knowing whether a
						// successor will remember it.
						r.outcome, r.err = failed, "wait-short"
					default:
						r.outcome = admitted
						l.admittedKeys[key].Add(1)
					}
				}
				mine = append(mine, r)
			}
		}()
	}
	go func() {
		wg.Wait()
		close(l.done)
	}()
	return l
}

// send sends args on fc and returns the integers of the reply. With wait
// > 0 it sends WAIT 1 wait after it in one pipeline, which go-redis
// writes and reads on one connection (one connection per pipeline
// attempt, of the main pool: runOne opts out of go-redis's pipeline
// pool; and the load makes one attempt): WAIT then counts the
// replicas that acknowledged this connection's last change, the
// command's own if it changed anything. acked is WAIT's reply and werr
// its error (0 and nil without WAIT); err is the command's.
func send(ctx context.Context, fc *redis.Client, args []any, wait time.Duration) (vals []int64, acked int64, werr, err error) {
	if wait <= 0 {
		vals, err = fc.Do(ctx, args...).Int64Slice()
		return vals, 0, nil, err
	}
	var cmd *redis.Cmd
	var wcmd *redis.Cmd
	_, _ = fc.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.Do(ctx, args...)
		wcmd = p.Do(ctx, "WAIT", 1, wait.Milliseconds())
		return nil
	})
	vals, err = cmd.Int64Slice()
	acked, werr = wcmd.Int64()
	return vals, acked, werr, err
}

// allKeysAdmitted reports whether every key had an admission.
func (l *load) allKeysAdmitted() bool {
	for i := range l.admittedKeys {
		if l.admittedKeys[i].Load() == 0 {
			return false
		}
	}
	return true
}

// allKeysRefused reports whether every key had a refusal: the load has
// used up each key's burst.
func (l *load) allKeysRefused() bool {
	for i := range l.refusedKeys {
		if l.refusedKeys[i].Load() == 0 {
			return false
		}
	}
	return true
}

// stop stops the workers (30 s at most) and returns every reply, in no
// particular order, and when the load ended.
func (l *load) stop(t *testing.T) ([]reply, time.Time) {
	t.Helper()
	l.cancel()
	select {
	case <-l.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the load's workers did not stop within 30 s")
	}
	return l.replies, time.Now()
}

// errKind names the kind of a client error: the Redis error code
// (NOREPLICAS, READONLY, LOADING, ...) or the network failure.
func errKind(err error) string {
	var rerr redis.Error
	var nerr net.Error
	switch {
	case errors.As(err, &rerr):
		code, _, _ := strings.Cut(rerr.Error(), " ")
		return code
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	case errors.Is(err, redis.ErrClosed):
		return "client closed"
	case errors.Is(err, net.ErrClosed), strings.Contains(err.Error(), "use of closed network connection"):
		return "connection closed"
	case errors.Is(err, syscall.EPIPE), strings.Contains(err.Error(), "EOF"):
		return "EOF"
	}
	return "other: " + err.Error()
}
