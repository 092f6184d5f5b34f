package envoyrls

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// User is who a call's decisions run as: an ACL user of the server and
// the password the caller gave for it. The zero User is the front door's
// own identity (the default user, with the server's password). It travels
// with the call's context (WithUser, UserFrom) down to the Store, which
// runs the call's commands as that user: the identity is a value of the
// call, not a property of a connection.
type User struct {
	Name, Password string
}

type userKey struct{}

// WithUser returns ctx carrying u: the Store runs the call as u.
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user ctx carries, or the zero User.
func UserFrom(ctx context.Context) User {
	u, _ := ctx.Value(userKey{}).(User)
	return u
}

// The answers to a call whose credentials are refused.
var (
	errBasicFormat = status.Error(codes.Unauthenticated, "malformed credentials: send metadata \"authorization: Basic base64(user:password)\"")
	errWrongPass   = status.Error(codes.Unauthenticated, "WRONGPASS invalid username-password pair or user is disabled")
)

// basicPrefix starts the value of the authorization metadata of a call
// authenticating as an ACL user (RFC 7617, as HTTP's Basic scheme).
const basicPrefix = "Basic "

// parseBasic reads "Basic base64(user:password)"; ok is false when v is
// not of the Basic scheme, err set when it is but is malformed.
func parseBasic(v string) (u User, ok bool, err error) {
	if len(v) < len(basicPrefix) || !strings.EqualFold(v[:len(basicPrefix)], basicPrefix) {
		return User{}, false, nil
	}
	raw, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(v[len(basicPrefix):]))
	if derr != nil {
		return User{}, true, errBasicFormat
	}
	name, pass, found := strings.Cut(string(raw), ":")
	if !found || name == "" {
		return User{}, true, errBasicFormat
	}
	return User{Name: name, Password: pass}, true, nil
}

// UserClients holds one go-redis client per ACL user that calls came as,
// each authenticated as its user: at most MaxUsers users at once (the
// least recently used one's client is closed to make room, once the calls
// using it are done), each with at most UserPoolSize connections. A user's
// password is checked once by an AUTH on the server and then compared
// with that one (SHA-256, constant time) until UserRecheck has passed,
// when the next call checks it on the server again: a password changed or
// a user disabled on the server stops working on the front door within
// UserRecheck. Safe for concurrent use.
type UserClients struct {
	newClient func(User) redis.UniversalClient
	max       int
	recheck   time.Duration
	verifying chan struct{} // a slot per check on the server under way

	mu      sync.Mutex // guards byName, pending, tick and every userClient's fields but client
	byName  map[string]*userClient
	pending map[string]*pendingCheck // a user's new client being checked
	tick    uint64
	closed  bool
}

// pendingCheck is a new client of a user whose password is being checked
// on the server: the user's other calls with the same password wait for
// it rather than each dialling a client of its own.
type pendingCheck struct {
	digest [sha256.Size]byte
	done   chan struct{} // closed once the check is over
}

// userClient is one user's client, shared by that user's calls.
type userClient struct {
	name    string
	digest  [sha256.Size]byte // of the password the server accepted
	client  redis.UniversalClient
	refs    int       // calls using client
	retired bool      // out of byName: closed once refs is 0
	lastUse uint64    // UserClients.tick at the last acquire
	checked time.Time // when the server last accepted the password
	// rechecking: a call is checking the password on the server again
	// (UserRecheck passed); the user's other calls use the entry meanwhile.
	rechecking bool
	local      localPool // in-process clients authenticated as the user (LocalStore)
}

// close closes e's client and its idle in-process clients.
func (e *userClient) close() error {
	e.local.drain()
	return e.client.Close()
}

// NewUserClients returns an empty set; newClient builds a client
// authenticating as a user (go-redis Options.Username and Password,
// PoolSize UserPoolSize).
func NewUserClients(newClient func(User) redis.UniversalClient) *UserClients {
	return &UserClients{newClient: newClient, max: MaxUsers, recheck: UserRecheck,
		verifying: make(chan struct{}, maxUserChecks), byName: map[string]*userClient{}, pending: map[string]*pendingCheck{}}
}

// Len returns the users whose client is open in the set.
func (uc *UserClients) Len() int {
	uc.mu.Lock()
	defer uc.mu.Unlock()
	return len(uc.byName)
}

// acquire returns u's client, checking u's password on the server first
// when it was not accepted within recheck; release it after use. A
// refused password is errWrongPass (gRPC Unauthenticated).
func (uc *UserClients) acquire(ctx context.Context, u User) (*userClient, error) {
	d := sha256.Sum256([]byte(u.Password))
	uc.mu.Lock()
	for {
		if uc.closed {
			uc.mu.Unlock()
			return nil, redis.ErrClosed
		}
		p := uc.pending[u.Name]
		if p == nil || subtle.ConstantTimeCompare(p.digest[:], d[:]) != 1 {
			break
		}
		// The same password is being checked: wait for that check.
		uc.mu.Unlock()
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		uc.mu.Lock()
	}
	e := uc.byName[u.Name]
	same := e != nil && subtle.ConstantTimeCompare(e.digest[:], d[:]) == 1
	if same && (time.Since(e.checked) < uc.recheck || e.rechecking) {
		// Accepted lately, or being checked again by another call: that
		// one call waits for the server, the others go on meanwhile.
		uc.useLocked(e)
		uc.mu.Unlock()
		return e, nil
	}
	if same {
		uc.useLocked(e) // held while its password is checked again
		e.rechecking = true
		defer func() {
			uc.mu.Lock()
			e.rechecking = false
			uc.mu.Unlock()
		}()
	} else if uc.pending[u.Name] == nil {
		p := &pendingCheck{digest: d, done: make(chan struct{})}
		uc.pending[u.Name] = p
		defer func() {
			uc.mu.Lock()
			delete(uc.pending, u.Name)
			uc.mu.Unlock()
			close(p.done)
		}()
	}
	uc.mu.Unlock()

	select {
	case uc.verifying <- struct{}{}:
	case <-ctx.Done():
		if same {
			uc.release(e)
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-uc.verifying }()
	if same {
		// AUTH again on one of its connections (AUTH runs for any user).
		if err := e.client.Do(ctx, "AUTH", u.Name, u.Password).Err(); err != nil {
			uc.release(e)
			if isWrongPass(err) {
				uc.retire(e)
				return nil, errWrongPass
			}
			return nil, authError(u, err)
		}
		uc.mu.Lock()
		e.checked = time.Now()
		uc.mu.Unlock()
		return e, nil
	}
	c := uc.newClient(u)
	// The connection's own AUTH (go-redis sends it when it dials) is the
	// check; the explicit one makes it happen now, on a new connection or
	// a pooled one alike.
	if err := c.Do(ctx, "AUTH", u.Name, u.Password).Err(); err != nil {
		c.Close()
		if isWrongPass(err) {
			return nil, errWrongPass
		}
		return nil, authError(u, err)
	}
	n := &userClient{name: u.Name, digest: d, client: c, checked: time.Now(), local: newLocalPool(userLocalIdle)}
	var toClose []*userClient
	uc.mu.Lock()
	if uc.closed {
		uc.mu.Unlock()
		c.Close()
		return nil, redis.ErrClosed
	}
	if old := uc.byName[u.Name]; old != nil {
		toClose = append(toClose, uc.retireLocked(old)...)
	}
	for len(uc.byName) >= uc.max {
		var lru *userClient
		for _, x := range uc.byName {
			if lru == nil || x.lastUse < lru.lastUse {
				lru = x
			}
		}
		toClose = append(toClose, uc.retireLocked(lru)...)
	}
	uc.byName[u.Name] = n
	uc.useLocked(n)
	uc.mu.Unlock()
	for _, x := range toClose {
		x.close()
	}
	return n, nil
}

func (uc *UserClients) useLocked(e *userClient) {
	uc.tick++
	e.lastUse = uc.tick
	e.refs++
}

// release ends a call's use of e.
func (uc *UserClients) release(e *userClient) {
	uc.mu.Lock()
	e.refs--
	closeIt := e.retired && e.refs == 0
	uc.mu.Unlock()
	if closeIt {
		e.close()
	}
}

// retire takes e out of the set (its password was refused on the
// server): it is closed once its last call releases it.
func (uc *UserClients) retire(e *userClient) {
	uc.mu.Lock()
	toClose := uc.retireLocked(e)
	uc.mu.Unlock()
	for _, x := range toClose {
		x.close()
	}
}

// retireLocked removes e from byName and returns it if it is to be
// closed now (no call uses it).
func (uc *UserClients) retireLocked(e *userClient) []*userClient {
	if uc.byName[e.name] == e {
		delete(uc.byName, e.name)
	}
	if e.retired {
		return nil
	}
	e.retired = true
	if e.refs == 0 {
		return []*userClient{e}
	}
	return nil
}

// Close closes every user's client; calls under way fail.
func (uc *UserClients) Close() error {
	uc.mu.Lock()
	uc.closed = true
	var all []*userClient
	for _, e := range uc.byName {
		e.retired = true
		all = append(all, e)
	}
	clear(uc.byName)
	uc.mu.Unlock()
	var errs []error
	for _, e := range all {
		errs = append(errs, e.close())
	}
	return errors.Join(errs...)
}

// isWrongPass reports whether err is the server's refusal of a password.
func isWrongPass(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGPASS")
}

// authError is a failure to check u's password other than a refusal
// (the server did not answer): Unavailable.
func authError(u User, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	return status.Errorf(codes.Unavailable, "cellserver: authenticating as %q: %v", u.Name, err)
}

// storeError maps a command's error for user u on key to the gRPC status
// a caller can act on: NOPERM (the user may not charge that counter) is
// PermissionDenied, WRONGPASS (the password no longer works) is
// Unauthenticated; anything else passes unchanged.
func storeError(u User, key string, err error) error {
	var re redis.Error
	if !errors.As(err, &re) {
		return err
	}
	msg := re.Error()
	switch {
	case strings.HasPrefix(msg, "NOPERM"):
		who := "the front door's user"
		if u.Name != "" {
			who = fmt.Sprintf("user %q", u.Name)
		}
		return status.Errorf(codes.PermissionDenied, "%s may not charge the counter %s: %s", who, key, msg)
	case strings.HasPrefix(msg, "WRONGPASS"):
		return errWrongPass
	}
	return err
}
