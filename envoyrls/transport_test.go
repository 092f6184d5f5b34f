package envoyrls_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testpki"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
)

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir; it returns the files and the client's TLS pieces.
func pki(t *testing.T, dir string) (caFile, certFile, keyFile string, pool *x509.CertPool, client tls.Certificate) {
	t.Helper()
	ca := testpki.NewCA(t, "rls test CA")
	// server and client: the front door presents it to the RESP port
	certFile, keyFile = ca.Issue(t, "127.0.0.1", x509.ExtKeyUsageAny).WriteFiles(t, dir, "server")
	return ca.WriteFile(t, dir), certFile, keyFile, ca.Pool(), ca.Issue(t, "127.0.0.1", x509.ExtKeyUsageClientAuth).TLS()
}

// TestMutualTLSAndToken: with --tls-cert-file and --tls-ca-cert-file, the
// gRPC port speaks TLS with the RESP port's certificate and requires a
// client certificate; with a password the token is still required.
func TestMutualTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile, pool, client := pki(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "basic.yaml"), []byte(basicYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, _ := servertest.Start(t, server.Config{TLSCertFile: certFile, TLSKeyFile: keyFile, TLSCACertFile: caFile, Password: "pw",
		RLSAddr: "127.0.0.1:0", RLSConfig: filepath.Join(dir, "basic.yaml"), RLS: envoyrls.New})
	dial := func(cfg *tls.Config) (pb.RateLimitServiceClient, func()) {
		conn, err := grpc.NewClient(srv.RLSAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		return pb.NewRateLimitServiceClient(conn), func() { conn.Close() }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer pw"))
	req := request("basic", 1, []string{"key1", "tls"})

	c, done := dial(&tls.Config{RootCAs: pool})
	if _, err := c.ShouldRateLimit(ctx, req); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	done()
	c, done = dial(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}})
	defer done()
	got, err := c.ShouldRateLimit(ctx, req)
	if err != nil || got.OverallCode != OK || got.Statuses[0].LimitRemaining != 49 {
		t.Fatalf("with a client certificate: %v %v", got, err)
	}
}

// TestCluster: the front door of one node of a two-node cluster charges
// each descriptor's counter on the node that owns its slot.
func TestCluster(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "another.yaml"), []byte(anotherYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	type node struct {
		srv  *server.Server
		addr string
		rdb  *redis.Client
	}
	var nodes []node
	for i := 0; i < 2; i++ {
		cfg := server.Config{ClusterEnabled: true, ClusterNodeID: topotest.ID(fmt.Sprintf("node-%d", i+1))}
		if i == 0 {
			cfg.RLSAddr, cfg.RLSConfig, cfg.RLS = "127.0.0.1:0", dir, envoyrls.New
		}
		srv, addr := servertest.Start(t, cfg)
		rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, node{srv, addr, rdb})
	}
	var shards []cluster.Shard
	for i, r := range [][2]int{{0, 8191}, {8192, 16383}} {
		h, p, _ := net.SplitHostPort(nodes[i].addr)
		port, _ := strconv.Atoi(p)
		shards = append(shards, cluster.Shard{SlotRanges: []cluster.SlotRange{{Start: r[0], End: r[1]}},
			Master: cluster.Node{ID: nodes[i].srv.Cluster().MyID(), IP: h, Port: port}, Replicas: []cluster.Node{}})
	}
	topo, _ := json.Marshal(shards)
	for _, n := range nodes {
		if err := n.rdb.Do(context.Background(), "CELLCLUSTER", "CONFIG", string(topo)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := grpc.NewClient(nodes[0].srv.RLSAddr().String(), grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	owners := [2]int{}
	for i := 0; i < 20; i++ {
		v := strconv.Itoa(i)
		got, err := c.ShouldRateLimit(context.Background(), request("another", 3, []string{"key2", v}, []string{"key3", v}))
		if err != nil || got.Statuses[0].LimitRemaining != 17 || got.Statuses[1].LimitRemaining != 7 {
			t.Fatalf("call %d: %v %v", i, got, err)
		}
		for _, key := range []string{"rls:another:key2=" + v, "rls:another:key3=" + v} {
			o := 0
			if keyslot.Of([]byte(key)) >= 8192 {
				o = 1
			}
			owners[o]++
			// READONLY-free check on the owner: the key exists there.
			if n, err := nodes[o].rdb.Exists(context.Background(), key).Result(); err != nil || n != 1 {
				t.Fatalf("%s not on its owner node %d: %v %v", key, o+1, n, err)
			}
		}
	}
	if owners[0] == 0 || owners[1] == 0 {
		t.Fatalf("keys on one node only: %v", owners)
	}
	t.Logf("keys per node: %v", owners)
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// TestReplication: the front door's counters are ordinary writes of the
// primary, passed on to its replica.
func TestReplication(t *testing.T) {
	h := startRLS(t, map[string]string{"another.yaml": anotherYAML}, nil)
	host, port, _ := net.SplitHostPort(h.resp)
	_, raddr := servertest.Start(t, server.Config{ReplicaOf: host + " " + port})
	h.call(t, request("another", 4, []string{"key2", "r"}), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	primary := redis.NewClient(&redis.Options{Addr: h.resp, DisableIdentity: true, Protocol: 2})
	defer primary.Close()
	// A write of this connection after the front door's; WAIT returns once
	// the replica has acknowledged it, hence the counter before it too.
	if err := primary.Set(ctx, "after-rls", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := primary.Do(ctx, "WAIT", 1, 20000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	replica := redis.NewClient(&redis.Options{Addr: raddr, DisableIdentity: true, Protocol: 2})
	defer replica.Close()
	info, err := replica.Do(ctx, "CL.INFO", "rls:another:key2=r").Slice()
	if err != nil || len(info) == 0 {
		t.Fatalf("CL.INFO on the replica: %v %v", info, err)
	}
	t.Logf("replica CL.INFO: %v", info)
}

// TestShutdown: the front door stops with the server (graceful stop,
// then the RESP port), and a new call is refused.
func TestShutdown(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "basic.yaml"), []byte(basicYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Addr: "127.0.0.1:0", RLSAddr: "127.0.0.1:0", RLSConfig: dir, RLS: envoyrls.New})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	conn, err := grpc.NewClient(s.RLSAddr().String(), grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.ShouldRateLimit(ctx, request("basic", 1, []string{"key1", "x"})); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-served
	if _, err := c.ShouldRateLimit(ctx, request("basic", 1, []string{"key1", "x"})); err == nil {
		t.Fatal("a call was answered after Shutdown")
	}
}

// TestHealth: grpc.health.v1 answers SERVING without the token.
func TestHealth(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.Password = "pw" })
	conn, err := grpc.NewClient(h.srv.RLSAddr().String(), grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
}

// TestPersistence: with a data directory, the front door's counters
// survive a restart (the same keyspace, the same persistence).
func TestPersistence(t *testing.T) {
	cfgDir, dataDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "another.yaml"), []byte(anotherYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := servertest.NewClock(t0)
	cfg := server.Config{Clock: clock.Now, DataDir: dataDir, OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{}),
		Fsync: "always", RLSAddr: "127.0.0.1:0", RLSConfig: cfgDir, RLS: envoyrls.New}
	remaining := func() uint32 {
		s, err := cellservertest.Start(cellservertest.WithClock(clock.Now), cellservertest.WithConfig(func(c *server.Config) {
			logger := c.Logger
			*c = cfg
			c.Addr, c.Logger, c.Clock = "127.0.0.1:0", logger, nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		conn, err := grpc.NewClient(s.Server().RLSAddr().String(), grpc.WithTransportCredentials(insecureCreds()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		r, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), request("another", 6, []string{"key3", "p"}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].LimitRemaining
	}
	if got := remaining(); got != 4 {
		t.Fatalf("first run: remaining %d, want 4", got)
	}
	if got := remaining(); got != 0 { // 6 + 4 of 10 after a restart
		t.Fatalf("after a restart: remaining %d, want 0", got)
	}
}
