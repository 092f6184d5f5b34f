package envoyrls

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellserver/cellserver/server"
)

// TokenMetadata is the gRPC metadata key that carries the token when the
// server has a password: "authorization: Bearer <password>" (Envoy:
// grpc_service.initial_metadata).
const TokenMetadata = "authorization"

// FrontDoor is the gRPC server of the Envoy rate limit service, wired to a
// cellserver through its own RESP port. It implements server.RLSServer.
type FrontDoor struct {
	grpc    *grpc.Server
	client  redis.UniversalClient
	service *Service
	health  *health.Server
}

// New builds the front door for server.Config.RLS: it loads src.ConfigPath
// (an invalid configuration is an error listing every problem), connects a
// go-redis client (a cluster client in cluster mode) to src.RESPAddr with
// the server's password, and serves gRPC with src.TLS and, when a password
// is set, the token check.
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
	var client redis.UniversalClient
	if src.Cluster {
		// Redirects (MOVED, ASK) are followed; a command is never retried
		// after a network error, which could charge a counter twice.
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{src.RESPAddr}, Password: src.Password,
			TLSConfig: src.ClientTLS, DisableIdentity: true, MaxRetries: -1, ContextTimeoutEnabled: true})
	} else {
		client = redis.NewClient(&redis.Options{Addr: src.RESPAddr, Password: src.Password, TLSConfig: src.ClientTLS,
			DisableIdentity: true, MaxRetries: -1, ContextTimeoutEnabled: true})
	}
	svc, err := NewService(cfg, Options{Store: RedisStore{Client: client}, Clock: src.Clock, ResponseHeaders: src.ResponseHeaders})
	if err != nil {
		client.Close()
		return nil, err
	}
	var opts []grpc.ServerOption
	if src.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(src.TLS.Clone())))
	}
	if src.Password != "" {
		opts = append(opts, grpc.UnaryInterceptor(tokenCheck(src.Password)))
	}
	g := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(g, svc)
	hs := health.NewServer() // grpc.health.v1, without a token (probes)
	healthpb.RegisterHealthServer(g, hs)
	if src.Logger != nil {
		src.Logger.Info("envoy rate limit service configuration loaded", "path", src.ConfigPath, "domains", strings.Join(cfg.Domains(), ","))
	}
	return &FrontDoor{grpc: g, client: client, service: svc, health: hs}, nil
}

// Service returns the service the front door answers with.
func (f *FrontDoor) Service() *Service { return f.service }

// RLSStats implements server.RLSStater: the Service's counts.
func (f *FrontDoor) RLSStats() server.RLSStats {
	st := f.service.Stats()
	return server.RLSStats{OK: st.OK, OverLimit: st.OverLimit, Errors: st.Errors,
		Domains: st.Domains, Rules: st.Rules, UnknownDomain: st.UnknownDomain}
}

// Serve implements server.RLSServer.
func (f *FrontDoor) Serve(ln net.Listener) error {
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
	return f.client.Close()
}

// Close implements server.RLSServer.
func (f *FrontDoor) Close() error {
	f.grpc.Stop()
	return f.client.Close()
}

var errToken = status.Error(codes.Unauthenticated, "missing or wrong token: send metadata \"authorization: Bearer <requirepass>\"")

// tokenCheck refuses calls without "authorization: Bearer <password>",
// comparing SHA-256 digests in constant time (as AUTH on the RESP port).
func tokenCheck(password string) grpc.UnaryServerInterceptor {
	want := sha256.Sum256([]byte("Bearer " + password))
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
			return h(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		ok := false
		for _, v := range md.Get(TokenMetadata) {
			got := sha256.Sum256([]byte(v))
			if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
				ok = true
			}
		}
		if !ok {
			return nil, errToken
		}
		return h(ctx, req)
	}
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
	f.service.SetConfig(cfg)
	return nil
}
