package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testpki"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct {
	dir                       string
	caFile, certFile, keyFile string
	clientCert, clientKey     string
	pool                      *x509.CertPool
	client                    tls.Certificate
	otherClient               tls.Certificate // signed by another CA
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	ca := testpki.NewCA(t, "cellserver test CA")
	p.caFile, p.pool = ca.WriteFile(t, p.dir), ca.Pool()
	p.certFile, p.keyFile = ca.Issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth).WriteFiles(t, p.dir, "server")
	client := ca.Issue(t, "client", x509.ExtKeyUsageClientAuth)
	p.clientCert, p.clientKey = client.WriteFiles(t, p.dir, "client")
	p.client = client.TLS()
	p.otherClient = testpki.NewCA(t, "another CA").Issue(t, "stranger", x509.ExtKeyUsageClientAuth).TLS()
	return p
}

func tlsClient(addr string, cfg *tls.Config) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg, MaxRetries: -1, DialTimeout: 5 * time.Second})
}

func TestTLSServerCertificate(t *testing.T) {
	p := newPKI(t)
	_, addr := servertest.Start(t, server.Config{TLSCertFile: p.certFile, TLSKeyFile: p.keyFile})
	ctx := context.Background()
	rdb := tlsClient(addr, &tls.Config{RootCAs: p.pool})
	defer rdb.Close()
	v, err := rdb.Do(ctx, "CL.THROTTLE", "tls", 15, 30, 60).Slice()
	if err != nil || len(v) != 5 || v[1] != int64(16) {
		t.Fatalf("CL.THROTTLE over TLS: %v %v", v, err)
	}
	// A plain-text client gets no answer: the port speaks TLS only.
	plain := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 2 * time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("plain-text PING answered on a TLS port")
	}
	// The server still serves TLS clients after that.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestTLSClientCertificates(t *testing.T) {
	p := newPKI(t)
	_, addr := servertest.Start(t, server.Config{TLSCertFile: p.certFile, TLSKeyFile: p.keyFile, TLSCACertFile: p.caFile})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"no client certificate", nil, false},
		{"certificate from another CA", []tls.Certificate{p.otherClient}, false},
		{"certificate from the configured CA", []tls.Certificate{p.client}, true},
	} {
		rdb := tlsClient(addr, &tls.Config{RootCAs: p.pool, Certificates: tc.certs})
		err := rdb.Ping(ctx).Err()
		rdb.Close()
		if (err == nil) != tc.ok {
			t.Errorf("%s: PING error %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestTLSRedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed")
	}
	p := newPKI(t)
	_, addr := servertest.Start(t, server.Config{TLSCertFile: p.certFile, TLSKeyFile: p.keyFile, TLSCACertFile: p.caFile})
	host, port, _ := net.SplitHostPort(addr)
	run := func(extra ...string) (string, error) {
		args := append([]string{"-h", host, "-p", port, "--tls", "--cacert", p.caFile}, extra...)
		args = append(args, "CL.THROTTLE", "cli", "15", "30", "60")
		cmd := exec.Command(cli, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	out, err := run("--cert", p.clientCert, "--key", p.clientKey)
	if err != nil || out != "0\n16\n15\n-1\n2\n" {
		t.Fatalf("redis-cli --tls with a client certificate: %q %v", out, err)
	}
	out, _ = run()
	if strings.Contains(out, "16\n15") {
		t.Fatalf("redis-cli without a client certificate was served: %q", out)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	p := newPKI(t)
	for _, cfg := range []server.Config{
		{TLSCertFile: p.certFile},
		{TLSKeyFile: p.keyFile},
		{TLSCertFile: p.certFile, TLSKeyFile: p.keyFile, TLSCACertFile: filepath.Join(p.dir, "missing.pem")},
		{TLSCertFile: p.keyFile, TLSKeyFile: p.certFile},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
}

// TestTLSReplication: a TLS-only primary that requires client
// certificates serves a replica started with TLSReplication, which
// verifies the primary with the CA and presents its certificate; without
// TLSReplication the replica's link stays down.
func TestTLSReplication(t *testing.T) {
	p := newPKI(t)
	tlsCfg := server.Config{TLSCertFile: p.certFile, TLSKeyFile: p.keyFile, TLSCACertFile: p.caFile}
	_, paddr := servertest.Start(t, tlsCfg)
	ctx := context.Background()
	primary := tlsClient(paddr, &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}})
	defer primary.Close()
	if err := primary.Do(ctx, "CL.THROTTLE", "over-tls", 5, 10, 60).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(paddr)
	plainCfg := server.Config{ReplicaOf: host + " " + port}
	_, plainAddr := servertest.Start(t, plainCfg)
	withCfg := tlsCfg
	withCfg.ReplicaOf, withCfg.TLSReplication, withCfg.TLSClientCertFile, withCfg.TLSClientKeyFile = host+" "+port, true, p.clientCert, p.clientKey
	_, replAddr := servertest.Start(t, withCfg)
	replica := tlsClient(replAddr, &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}})
	defer replica.Close()
	testwait.For(t, 20*time.Second, "the TLS replica to get the key", func() (bool, string) {
		got, err := replica.Get(ctx, "over-tls").Result()
		want, _ := primary.Get(ctx, "over-tls").Result()
		return err == nil && got == want, fmt.Sprintf("%q, %v", got, err)
	})
	plain := redis.NewClient(&redis.Options{Addr: plainAddr})
	defer plain.Close()
	if s, _ := plain.Info(ctx, "replication").Result(); !strings.Contains(s, "master_link_status:down") {
		t.Fatalf("a replica without TLS linked to a TLS-only primary:\n%s", s)
	}
}
