package compat

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"
)

// goredisDoer is what both *redis.Client and *redis.Conn offer.
type goredisDoer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
	Pipeline() redis.Pipeliner
}

// newGoRedis returns a go-redis client with default options (it sends
// HELLO 3 first and speaks RESP3).
// A block that SELECTs a database needs one connection throughout, so it
// gets a sticky *redis.Conn from the same client.
func newGoRedis(t *testing.T, addr string, b *block) goredisDoer {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	for _, in := range b.instants {
		for _, c := range in.cmds {
			if eqFoldASCII(c.args[0], "select") {
				conn := rdb.Conn()
				t.Cleanup(func() { conn.Close() })
				return conn
			}
		}
	}
	return rdb
}

func eqFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// goValue is what go-redis's Cmd.Val() returns for the reply (RESP2).
func (r reply) goValue() any {
	switch r.kind {
	case replyInts:
		v := make([]any, len(r.ints))
		for i, n := range r.ints {
			v[i] = n
		}
		return v
	case replyBulks:
		v := make([]any, len(r.strs))
		for i, s := range r.strs {
			v[i] = s
		}
		return v
	case replyInt:
		return r.n
	case replyBulk, replyStatus:
		return r.s
	}
	return nil
}

// checkGoRedis compares a go-redis result with the expected reply: values
// for data, err.Error() for error replies, redis.Nil for a null bulk.
func checkGoRedis(want reply, val any, err error) error {
	switch want.kind {
	case replyError:
		if err == nil || errors.Is(err, redis.Nil) {
			return fmt.Errorf("got value %#v (err %v), want error %q", val, err, want.s)
		}
		if err.Error() != want.s {
			return fmt.Errorf("got error %q, want %q", err.Error(), want.s)
		}
	case replyNil:
		if !errors.Is(err, redis.Nil) {
			return fmt.Errorf("got %#v, %v; want redis.Nil", val, err)
		}
	default:
		if err != nil {
			return fmt.Errorf("got error %q, want %s", err.Error(), want)
		}
		if !reflect.DeepEqual(val, want.goValue()) {
			return fmt.Errorf("got %#v, want %#v", val, want.goValue())
		}
	}
	return nil
}

func toAny(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// TestReplayGoRedis replays every transcript with rdb.Do, one command at a
// time.
func TestReplayGoRedis(t *testing.T) {
	forEachBlock(t, "go-redis Do", func(t *testing.T, b *block) (int, int) {
		clk, addr := startServer(t)
		rdb := newGoRedis(t, addr, b)
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		n := 0
		for _, in := range b.instants {
			clk.Set(t0.Add(in.at))
			for _, c := range in.cmds {
				cmd := rdb.Do(ctx, toAny(c.args)...)
				if err := checkGoRedis(c.want, cmd.Val(), cmd.Err()); err != nil {
					t.Errorf("%s: at t0+%v: %s: %v", b.where(c), in.at, c, err)
				}
				n++
			}
		}
		return n, 0
	})
}

// TestReplayGoRedisPipeline replays every transcript through go-redis
// pipelines: all commands of one clock instant are queued and sent with one
// Exec.
func TestReplayGoRedisPipeline(t *testing.T) {
	forEachBlock(t, "go-redis pipeline", func(t *testing.T, b *block) (int, int) {
		clk, addr := startServer(t)
		rdb := newGoRedis(t, addr, b)
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		n := 0
		for _, in := range b.instants {
			clk.Set(t0.Add(in.at))
			pipe := rdb.Pipeline()
			cmds := make([]*redis.Cmd, len(in.cmds))
			for i, c := range in.cmds {
				cmds[i] = pipe.Do(ctx, toAny(c.args)...)
			}
			// Exec returns the first command error; each command is checked
			// on its own below.
			_, _ = pipe.Exec(ctx)
			for i, c := range in.cmds {
				if err := checkGoRedis(c.want, cmds[i].Val(), cmds[i].Err()); err != nil {
					t.Errorf("%s: at t0+%v: %s: %v", b.where(c), in.at, c, err)
				}
				n++
			}
		}
		return n, 0
	})
}
