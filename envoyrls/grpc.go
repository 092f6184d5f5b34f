package envoyrls

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellserver/cellserver/server"
)

// TokenMetadata is the gRPC metadata key that carries the caller's
// credentials (Envoy: grpc_service.initial_metadata): "authorization:
// Bearer <password>" for the default user when the server has a password,
// or "authorization: Basic base64(user:password)" to run the call as an
// ACL user.
const TokenMetadata = "authorization"

// FrontDoor is the gRPC server of the Envoy rate limit service, wired to a
// cellserver through its own RESP port. It implements server.RLSServer.
type FrontDoor struct {
	grpc     *grpc.Server
	client   redis.UniversalClient
	users    *UserClients
	local    *LocalStore // nil: decisions over the loopback client
	service  *Service
	health   *health.Server
	maxConns int          // src.MaxClients; 0: no cap
	logger   *slog.Logger // may be nil
	cluster  bool         // src.Cluster: a rule's audit is refused
}

// errAuditCluster refuses, in cluster mode, a configuration with a rule
// that audits: its stream would have to be on the node of every counter.
var errAuditCluster = fmt.Errorf("%w: audit is not available in cluster mode (the audit stream must be on the node deciding every counter)", ErrConfig)

// New builds the front door for server.Config.RLS: it loads src.ConfigPath
// (an invalid configuration is an error listing every problem), connects a
// go-redis client (a cluster client in cluster mode) to src.RESPAddr with
// the server's password, and serves gRPC with src.TLS, the limits of
// limits.go (at most src.MaxClients connections) and, when a password is
// set, the token check.
func New(src server.RLSSources) (server.RLSServer, error) {
	fd, err := NewFrontDoor(src)
	if err != nil {
		return nil, err
	}
	return fd, nil
}

// NewFrontDoor is New with the concrete type (Service, for tests and stats).
func NewFrontDoor(src server.RLSSources) (*FrontDoor, error) {
	cfg, err := LoadPath(src.ConfigPath)
	if err != nil {
		return nil, err
	}
	if src.Cluster && cfg.Audits() {
		return nil, errAuditCluster
	}
	// newClient connects to the RESP port as u (the zero User: the
	// default user with the server's password), poolSize connections at
	// most, pipelines included (0: go-redis's defaults, a pool that opens
	// more connections past its size when calls wait and a second pool
	// for pipelines).
	newClient := func(u User, poolSize int) redis.UniversalClient {
		var maint *maintnotifications.Config // nil: go-redis's default
		pipePool := 0                        // go-redis's default: a pool of 10 for pipelines
		if poolSize > 0 {
			pipePool = -1 // pipelines on the pool itself: poolSize is the cap
		}
		if u.Name == "" {
			u.Password = src.Password
		} else {
			// A user may hold only the limiter commands: a connection
			// sends nothing else (no CLIENT MAINT_NOTIFICATIONS, no CLIENT
			// SETINFO), which it could not run and ACL LOG would count.
			maint = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		}
		if src.Cluster {
			// Redirects (MOVED, ASK) are followed; a command is never retried
			// after a network error, which could charge a counter twice.
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{src.RESPAddr}, Username: u.Name, Password: u.Password,
				TLSConfig: src.ClientTLS, DisableIdentity: true, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: poolSize,
				MaxActiveConns: poolSize, PipelinePoolSize: pipePool, MaintNotificationsConfig: maint})
		}
		return redis.NewClient(&redis.Options{Addr: src.RESPAddr, Username: u.Name, Password: u.Password, TLSConfig: src.ClientTLS,
			DisableIdentity: true, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: poolSize, MaxActiveConns: poolSize,
			PipelinePoolSize: pipePool, MaintNotificationsConfig: maint})
	}
	client := newClient(User{}, 0)
	users := NewUserClients(func(u User) redis.UniversalClient { return newClient(u, UserPoolSize) })
	var store Store = RedisStore{Client: client, Users: users}
	var local *LocalStore
	if src.Local != nil {
		// Decided in process, through the server's dispatcher; the
		// loopback client stays for the keys of other nodes.
		local = NewLocalStore(RedisStore{Client: client, Users: users}, src.Local, src.Password)
		store = local
	}
	svc, err := NewService(cfg, Options{Store: store, Clock: src.Clock, ResponseHeaders: src.ResponseHeaders})
	if err != nil {
		client.Close()
		return nil, err
	}
	opts := serverLimits()
	if src.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(src.TLS.Clone())))
	}
	auth := &authenticator{users: users}
	if src.Password != "" {
		auth.token = newTokenCheck(src.Password)
		// ShouldRateLimit checks the credentials itself
		// (rateLimitService); this guards any other unary method but the
		// health service's.
		opts = append(opts, grpc.UnaryInterceptor(auth.unary))
	}
	// Stop waits for the handlers under way, so that none still decides
	// in process once the server goes on closing its keyspace.
	opts = append(opts, grpc.WaitForHandlers(true))
	g := grpc.NewServer(opts...)
	g.RegisterService(rateLimitService(auth), svc)
	hs := health.NewServer() // grpc.health.v1, without a token (probes)
	healthpb.RegisterHealthServer(g, hs)
	if src.Logger != nil {
		src.Logger.Info("envoy rate limit service configuration loaded", "path", src.ConfigPath, "domains", strings.Join(cfg.Domains(), ","))
	}
	return &FrontDoor{grpc: g, client: client, users: users, local: local, service: svc, health: hs, maxConns: src.MaxClients, logger: src.Logger, cluster: src.Cluster}, nil
}

// Service returns the service the front door answers with.
func (f *FrontDoor) Service() *Service { return f.service }

// RLSStats implements server.RLSStater: the Service's counts.
func (f *FrontDoor) RLSStats() server.RLSStats {
	st := f.service.Stats()
	return server.RLSStats{OK: st.OK, OverLimit: st.OverLimit, Errors: st.Errors,
		Domains: st.Domains, Rules: st.Rules, UnknownDomain: st.UnknownDomain}
}

// Serve implements server.RLSServer: at most RLSSources.MaxClients
// connections at once, the next closed as it is accepted.
func (f *FrontDoor) Serve(ln net.Listener) error {
	if f.maxConns > 0 {
		ln = newConnCap(ln, f.maxConns, f.logger)
	}
	err := f.grpc.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown implements server.RLSServer: a graceful stop bounded by ctx.
func (f *FrontDoor) Shutdown(ctx context.Context) error {
	f.health.Shutdown() // NOT_SERVING while calls under way finish
	done := make(chan struct{})
	go func() {
		f.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		f.grpc.Stop()
		<-done
	}
	return f.closeClients()
}

// Close implements server.RLSServer.
func (f *FrontDoor) Close() error {
	f.grpc.Stop()
	return f.closeClients()
}

// closeClients closes the users' clients, the default user's in-process
// clients and the loopback client, once no handler runs (the server
// waits for its handlers on Stop: grpc.WaitForHandlers).
func (f *FrontDoor) closeClients() error {
	if f.local != nil {
		f.local.def.drain()
	}
	return errors.Join(f.users.Close(), f.client.Close())
}

// Users returns the clients of the ACL users calls came as.
func (f *FrontDoor) Users() *UserClients { return f.users }

var errToken = status.Error(codes.Unauthenticated, "missing or wrong token: send metadata \"authorization: Bearer <requirepass>\" (or \"authorization: Basic base64(user:password)\" for an ACL user)")

// authenticator finds who a call runs as from its metadata alone, before
// its request is read: "authorization: Basic base64(user:password)" is
// that ACL user, its password checked on the server (UserClients);
// otherwise, when the server has a password, the call must carry the
// default user's token ("Bearer <password>"); otherwise it runs as the
// default user.
type authenticator struct {
	token *tokenCheck // nil: no password, no token needed
	users *UserClients
}

// authenticate returns ctx carrying the call's User (WithUser), or the
// error the call is refused with.
func (a *authenticator) authenticate(ctx context.Context) (context.Context, error) {
	for _, v := range metadata.ValueFromIncomingContext(ctx, TokenMetadata) {
		u, ok, err := parseBasic(v)
		if !ok {
			continue
		}
		if err != nil {
			return nil, err
		}
		e, err := a.users.acquire(ctx, u)
		if err != nil {
			return nil, err
		}
		a.users.release(e)
		return WithUser(ctx, u), nil
	}
	if a.token != nil {
		if err := a.token.check(ctx); err != nil {
			return nil, err
		}
	}
	return ctx, nil
}

// unary is the check as a unary interceptor: it runs after gRPC has read
// and decoded the request, hence not the one ShouldRateLimit relies on.
func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
		return h(ctx, req)
	}
	ctx, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// tokenCheck refuses calls without "authorization: Bearer <password>",
// comparing SHA-256 digests in constant time (as AUTH on the RESP port).
// The health service needs no token (probes).
type tokenCheck struct {
	want [sha256.Size]byte
}

func newTokenCheck(password string) *tokenCheck {
	return &tokenCheck{want: sha256.Sum256([]byte("Bearer " + password))}
}

// check is nil when the call's metadata carries the token, else errToken.
func (t *tokenCheck) check(ctx context.Context) error {
	ok := 0
	for _, v := range metadata.ValueFromIncomingContext(ctx, TokenMetadata) {
		got := sha256.Sum256([]byte(v))
		ok |= subtle.ConstantTimeCompare(got[:], t.want[:])
	}
	if ok != 1 {
		return errToken
	}
	return nil
}

// requests are the gRPC handler's requests, back once the response is sent.
var requests = sync.Pool{New: func() any { return new(pb.RateLimitRequest) }}

// rateLimitService is pb.RateLimitService_ServiceDesc with ShouldRateLimit
// registered as a stream handler of a unary call (the same call on the
// wire, and gRPC checks it carries exactly one request): the handler
// authenticates the call (auth) on its headers before it reads the
// request, so a call without the token or a user's password is refused
// before its message is read, let alone decoded. (A unary handler reads the request before any
// interceptor runs; a grpc.InTapHandle that refuses a call never cancels
// the call's context, which keeps the timer of its grpc-timeout, about
// 300 bytes, until the deadline: hours, for a caller who says so.)
func rateLimitService(auth *authenticator) *grpc.ServiceDesc {
	d := pb.RateLimitService_ServiceDesc
	d.Methods = nil
	d.Streams = []grpc.StreamDesc{{StreamName: "ShouldRateLimit", Handler: func(srv any, ss grpc.ServerStream) error {
		ctx, err := auth.authenticate(ss.Context())
		if err != nil {
			return err
		}
		svc, ok := srv.(*Service)
		if !ok {
			req := new(pb.RateLimitRequest)
			if err := ss.RecvMsg(req); err != nil {
				return err
			}
			resp, err := srv.(pb.RateLimitServiceServer).ShouldRateLimit(ctx, req)
			if err != nil {
				return err
			}
			return ss.SendMsg(resp)
		}
		// The response is encoded by SendMsg before it returns: its
		// buffers serve the next call. (grpc-go warns that a stats
		// handler or tracing may read a message after SendMsg; the
		// server has neither: serverLimits. Add one, and a response must
		// not be reused.) The request too is decoded into one of the
		// previous calls': nothing holds it once the response is sent.
		req := requests.Get().(*pb.RateLimitRequest)
		defer func() {
			req.Reset() // no reference to this call's strings
			requests.Put(req)
		}()
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		a := answers.Get().(*answer)
		defer a.release()
		resp, err := svc.answer(ctx, req, a)
		if err != nil {
			return err
		}
		return ss.SendMsg(resp)
	}}}
	return &d
}

// Reload reads the configuration again from path (server.RLSSources's
// ConfigPath) and swaps it in whole; an invalid one is refused with every
// problem and the configuration in use stays. Counters are keyed by the
// descriptors, not the rules, so a rule whose limit changes keeps its
// counter (the new limit applies to the count so far).
func (f *FrontDoor) Reload(path string) error {
	cfg, err := LoadPath(path)
	if err != nil {
		return err
	}
	if f.cluster && cfg.Audits() {
		return errAuditCluster
	}
	f.service.SetConfig(cfg)
	return nil
}
