package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
)

// TestTLSFilesReadOnce: New reads each TLS file once, though the listener,
// a replica's link and the Envoy front door all use them.
func TestTLSFilesReadOnce(t *testing.T) {
	p := newPKI(t)
	reads, restore := server.CountTLSReads()
	defer restore()
	s, err := server.New(server.Config{Addr: "127.0.0.1:0", TLSCertFile: p.certFile, TLSKeyFile: p.keyFile,
		TLSCACertFile: p.caFile, TLSClientCertFile: p.clientCert, TLSClientKeyFile: p.clientKey, TLSReplication: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := reads()
	for _, f := range []string{p.certFile, p.keyFile, p.caFile, p.clientCert, p.clientKey} {
		if got[f] != 1 {
			t.Errorf("%s read %d times, want once", filepath.Base(f), got[f])
		}
	}
}

// TestTLSConfigField: an embedder's *tls.Config serves TLS (here with
// client certificates required), and excludes the file fields.
func TestTLSConfigField(t *testing.T) {
	p := newPKI(t)
	cert, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	_, addr := servertest.Start(t, server.Config{TLSConfig: tc})
	ctx := context.Background()
	rdb := tlsClient(addr, &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over the embedder's TLS: %v", err)
	}
	stranger := tlsClient(addr, &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.otherClient}})
	defer stranger.Close()
	if err := stranger.Ping(ctx).Err(); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	err = server.Config{TLSConfig: tc, TLSCertFile: p.certFile, TLSKeyFile: p.keyFile}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Config.TLSConfig replaces") {
		t.Fatalf("TLSConfig with TLSCertFile: %v, want refused", err)
	}
}

// TestNewClosesTheStoreOnFailure: a New that fails after opening the data
// directory closes it, so that the directory can be opened again.
func TestNewClosesTheStoreOnFailure(t *testing.T) {
	dir := t.TempDir()
	clusterFile := filepath.Join(t.TempDir(), "nodes.json")
	if err := os.WriteFile(clusterFile, []byte("not a topology"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Addr: "127.0.0.1:0", DataDir: dir, OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{}),
		Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
	bad := cfg
	bad.ClusterEnabled, bad.ClusterConfigFile = true, clusterFile
	if _, err := server.New(bad); err == nil {
		t.Fatal("New with a damaged cluster config file succeeded")
	} else {
		t.Logf("first New: %v", err)
	}
	// servertest.Start fails the test if New fails (the directory still
	// locked by the first store), and serves and stops the server.
	servertest.Start(t, cfg)
}

// TestNewBuildsItsLogger: without a Logger, New logs as LogFormat and
// LogLevel say; with neither, to slog.Default().
func TestNewBuildsItsLogger(t *testing.T) {
	var buf bytes.Buffer
	defer server.SetLogOutput(&buf)()
	s, err := server.New(server.Config{Addr: "127.0.0.1:0", LogFormat: "json", LogLevel: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Logger().Info("not shown")
	s.Logger().Warn("shown")
	if got := buf.String(); !strings.HasPrefix(got, "{") || !strings.Contains(got, `"msg":"shown"`) || strings.Contains(got, "not shown") {
		t.Fatalf("log output %q, want one JSON line at warn", got)
	}
	d, err := server.New(server.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Logger() != slog.Default() {
		t.Fatal("a Config without Logger, LogFormat or LogLevel does not log to slog.Default()")
	}
}

// TestRedisVersionValidated: --redis-version takes Redis's own form,
// major.minor.patch, since clients compare it number by number.
func TestRedisVersionValidated(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "7.0.15": true, "7.4.0": true, "7.4": false, "v7.4.0": false, "7.4.0-rc1": false, "7.4.0 ": false} {
		err := server.Config{RedisVersion: v}.Validate()
		if (err == nil) != ok {
			t.Errorf("RedisVersion %q: Validate() = %v, want ok=%v", v, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "redis-version") {
			t.Errorf("RedisVersion %q: error %q does not name redis-version", v, err)
		}
	}
}
