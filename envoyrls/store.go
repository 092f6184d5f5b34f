package envoyrls

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RedisStore is a Store over cellserver's own commands, sent with go-redis
// (a *redis.Client to one node, or a *redis.ClusterClient, which routes
// each key to the node that owns its slot). The hits of one call go in one
// pipeline, one command each: CL.FIXED, CL.SLIDING or CL.SLIDINGLOG
// key limit <period>ns quantity MS, or CL.THROTTLE key burst limit
// <period seconds> quantity for GCRA.
//
// A call whose context carries a User (WithUser) is sent through that
// user's client from Users, so the server's ACL decides what it may
// charge: a key outside the user's patterns is gRPC PermissionDenied, a
// password the server no longer accepts Unauthenticated. Other calls go
// through Client.
type RedisStore struct {
	Client redis.Cmdable
	// Users holds the clients of the users calls come as; nil refuses
	// every call that carries a User.
	Users *UserClients
}

var errNoUsers = status.Error(codes.Unauthenticated, "this front door takes no user credentials")

// Hit implements Store.
func (s RedisStore) Hit(ctx context.Context, hits []Hit) ([]Result, error) {
	u := UserFrom(ctx)
	if u.Name == "" {
		return hit(ctx, s.Client, u, hits)
	}
	return s.Users.run(ctx, u, func(e *userClient) ([]Result, error) { return hit(ctx, e.client, u, hits) })
}

// run calls fn with the entry of user u (acquired, released after fn),
// and retires the entry when fn's error says the server no longer takes
// u's password. A nil set takes no user credentials.
func (c *UserClients) run(ctx context.Context, u User, fn func(e *userClient) ([]Result, error)) ([]Result, error) {
	if c == nil {
		return nil, errNoUsers
	}
	e, err := c.acquire(ctx, u)
	if err != nil {
		return nil, err
	}
	defer c.release(e)
	out, err := fn(e)
	if status.Code(err) == codes.Unauthenticated {
		c.retire(e) // the server no longer takes the password
	}
	return out, err
}

func hit(ctx context.Context, client redis.Cmdable, u User, hits []Hit) ([]Result, error) {
	cmds := make([]*redis.Cmd, len(hits))
	_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range hits {
			cmds[i] = p.Do(ctx, command(h)...)
		}
		return nil
	})
	if err != nil {
		for i, c := range cmds {
			if c != nil && c.Err() != nil {
				return nil, storeError(u, hits[i].Key, c.Err())
			}
		}
		return nil, err
	}
	out := make([]Result, len(hits))
	for i, c := range cmds {
		r, err := parseReply(c, hits[i].Algorithm != GCRA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", hits[i].Key, err)
		}
		out[i] = r
	}
	return out, nil
}

func command(h Hit) []any {
	q := strconv.FormatInt(h.Hits, 10)
	switch h.Algorithm {
	case GCRA:
		if h.Hits < 0 {
			q = "0" // CL.THROTTLE takes no refund: a refund only reads
		}
		return []any{"CL.THROTTLE", h.Key, strconv.FormatInt(h.Burst, 10), strconv.FormatInt(h.Limit, 10),
			strconv.FormatInt(int64(h.Period/time.Second), 10), q}
	case Sliding:
		return []any{"CL.SLIDING", h.Key, strconv.FormatInt(h.Limit, 10), strconv.FormatInt(int64(h.Period), 10) + "ns", q, "MS"}
	case SlidingLog:
		if h.Hits < 0 {
			q = "0" // CL.SLIDINGLOG takes no refund
		}
		return []any{"CL.SLIDINGLOG", h.Key, strconv.FormatInt(h.Limit, 10), strconv.FormatInt(int64(h.Period), 10) + "ns", q, "MS"}
	default:
		return []any{"CL.FIXED", h.Key, strconv.FormatInt(h.Limit, 10), strconv.FormatInt(int64(h.Period), 10) + "ns", q, "MS"}
	}
}

// parseReply reads [limited, limit, remaining, retry_after, reset_after].
func parseReply(c *redis.Cmd, ms bool) (Result, error) {
	v, err := c.Int64Slice()
	if err != nil {
		return Result{}, err
	}
	if len(v) != 5 {
		return Result{}, fmt.Errorf("unexpected reply %v", v)
	}
	unit := time.Second
	if ms {
		unit = time.Millisecond
	}
	return Result{Limited: v[0] == 1, Remaining: v[2], ResetAfter: time.Duration(v[4]) * unit}, nil
}
