package compat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// TestGoRedisPubSub: go-redis's PubSub (Subscribe, PSubscribe, Receive,
// Channel, Unsubscribe) against cellserver, over RESP2 and RESP3:
// confirmations come back as *redis.Subscription, messages as
// *redis.Message in publish order, and PUBLISH counts the receivers.
func TestGoRedisPubSub(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
			defer rdb.Close()
			ps := rdb.Subscribe(ctx, "news")
			defer ps.Close()
			if v, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			} else if s, ok := v.(*redis.Subscription); !ok || s.Kind != "subscribe" || s.Channel != "news" || s.Count != 1 {
				t.Fatalf("Receive: %#v", v)
			}
			if err := ps.PSubscribe(ctx, "n*"); err != nil {
				t.Fatal(err)
			}
			if v, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			} else if s, ok := v.(*redis.Subscription); !ok || s.Kind != "psubscribe" || s.Channel != "n*" || s.Count != 2 {
				t.Fatalf("Receive: %#v", v)
			}
			const n = 100
			for i := 0; i < n; i++ {
				if got, err := rdb.Publish(ctx, "news", fmt.Sprint(i)).Result(); err != nil || got != 2 {
					t.Fatalf("PUBLISH %d: %d, %v", i, got, err)
				}
			}
			for i := 0; i < n; i++ {
				for _, pattern := range []string{"", "n*"} {
					v, err := ps.Receive(ctx)
					if err != nil {
						t.Fatal(err)
					}
					m, ok := v.(*redis.Message)
					if !ok || m.Channel != "news" || m.Pattern != pattern || m.Payload != fmt.Sprint(i) {
						t.Fatalf("message %d (pattern %q): %#v", i, pattern, v)
					}
				}
			}
			if err := ps.Unsubscribe(ctx); err != nil {
				t.Fatal(err)
			}
			if v, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			} else if s, ok := v.(*redis.Subscription); !ok || s.Kind != "unsubscribe" || s.Channel != "news" || s.Count != 1 {
				t.Fatalf("Receive: %#v", v)
			}
			if got, err := rdb.PubSubNumPat(ctx).Result(); err != nil || got != 1 {
				t.Fatalf("PUBSUB NUMPAT: %d, %v", got, err)
			}
			t.Logf("RESP%d: %d messages and %d pmessages received in order", proto, n, n)
		})
	}
}
