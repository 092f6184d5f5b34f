package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// tlsHandshakeTimeout bounds a client's TLS handshake.
const tlsHandshakeTimeout = 10 * time.Second

// tlsMaterial is what the TLS settings give, each file read once, by
// loadTLS: the listener's configuration and what this node uses as a TLS
// client (a replica dialling its primary, the Envoy front door dialling
// the RESP port).
type tlsMaterial struct {
	server *tls.Config // the listener's; nil: plain TCP
	// cas verifies peers: TLSCACertFile's CAs, else TLSConfig.ClientCAs;
	// nil for none.
	cas *x509.CertPool
	// client is the certificate presented as a TLS client:
	// TLSClientCertFile's, else the server certificate; nil for none.
	client []tls.Certificate
}

// loadTLS reads the certificate files (or takes TLSConfig) into the TLS
// material, once.
func (c Config) loadTLS() (tlsMaterial, error) {
	var m tlsMaterial
	if (c.TLSClientCertFile == "") != (c.TLSClientKeyFile == "") {
		return m, errors.New("tls: --tls-client-cert-file and --tls-client-key-file must be given together")
	}
	files := c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCACertFile != ""
	if c.TLSConfig != nil && files {
		return m, errors.New("tls: Config.TLSConfig replaces --tls-cert-file, --tls-key-file and --tls-ca-cert-file: set one or the other")
	}
	if c.TLSClientCertFile != "" {
		if c.TLSCertFile == "" && c.TLSConfig == nil {
			return m, errors.New("tls: --tls-client-cert-file needs --tls-cert-file (TLS on)")
		}
		cert, err := loadKeyPair(c.TLSClientCertFile, c.TLSClientKeyFile)
		if err != nil {
			return m, fmt.Errorf("tls: client certificate: %w", err)
		}
		m.client = []tls.Certificate{cert}
	}
	if c.TLSConfig != nil {
		m.server = c.TLSConfig.Clone()
		m.cas = m.server.ClientCAs
		if m.client == nil && len(m.server.Certificates) > 0 {
			m.client = m.server.Certificates[:1]
		}
		return m, nil
	}
	if !files {
		return m, nil
	}
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		return m, errors.New("tls: --tls-cert-file and --tls-key-file must be given together")
	}
	cert, err := loadKeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return m, fmt.Errorf("tls: %w", err)
	}
	m.server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if m.client == nil {
		m.client = m.server.Certificates
	}
	if c.TLSCACertFile != "" {
		pool, err := loadCAs(c.TLSCACertFile)
		if err != nil {
			return m, err
		}
		m.cas = pool
		m.server.ClientCAs = pool
		m.server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return m, nil
}

// readFile reads a TLS file; tests count the reads through it.
var readFile = os.ReadFile

// loadKeyPair is tls.LoadX509KeyPair, reading through readFile.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := readFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// loadCAs reads the PEM certificates of file into a pool.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := readFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: no certificate found in %s", file)
	}
	return pool, nil
}

// replicationTLS is the TLS configuration a replica dials its primary
// with when TLSReplication is on (Redis's tls-replication): the primary's
// certificate is verified against m.cas (--tls-ca-cert-file; the system's
// roots without it) for the host of replicaof, and the replica presents
// m.client (--tls-client-cert-file, else --tls-cert-file).
func (c Config) replicationTLS(m tlsMaterial) *tls.Config {
	if !c.TLSReplication {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.cas, Certificates: m.client}
}

// tlsListener hands out server-side TLS connections whose handshake runs,
// bounded in time, on the connection's own goroutine at its first read.
type tlsListener struct {
	net.Listener
	cfg  *tls.Config
	idle time.Duration
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, l.cfg), idle: l.idle}, nil
}

type handshakeConn struct {
	*tls.Conn
	idle time.Duration
	once sync.Once
	err  error
}

func (c *handshakeConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), tlsHandshakeTimeout)
		defer cancel()
		c.err = c.HandshakeContext(ctx)
		if c.idle > 0 {
			_ = c.SetReadDeadline(time.Now().Add(c.idle))
		}
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(b)
}
