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

// tlsConfig builds the server's TLS configuration from the certificate
// files, or returns nil when TLS is off.
func (c Config) tlsConfig() (*tls.Config, error) {
	if (c.TLSClientCertFile == "") != (c.TLSClientKeyFile == "") {
		return nil, errors.New("tls: --tls-client-cert-file and --tls-client-key-file must be given together")
	}
	if c.TLSClientCertFile != "" {
		if c.TLSCertFile == "" {
			return nil, errors.New("tls: --tls-client-cert-file needs --tls-cert-file (TLS on)")
		}
		if _, err := tls.LoadX509KeyPair(c.TLSClientCertFile, c.TLSClientKeyFile); err != nil {
			return nil, fmt.Errorf("tls: client certificate: %w", err)
		}
	}
	if c.TLSCertFile == "" && c.TLSKeyFile == "" && c.TLSCACertFile == "" {
		return nil, nil
	}
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		return nil, errors.New("tls: --tls-cert-file and --tls-key-file must be given together")
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.TLSCACertFile != "" {
		pool, err := loadCAs(c.TLSCACertFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// loadCAs reads the PEM certificates of file into a pool.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: no certificate found in %s", file)
	}
	return pool, nil
}

// replicationTLS builds the TLS configuration a replica dials its primary
// with when TLSReplication is on (Redis's tls-replication): the primary's
// certificate is verified against --tls-ca-cert-file (the system's roots
// without it) for the host of replicaof, and the replica presents its
// client certificate (--tls-client-cert-file, else --tls-cert-file).
func (c Config) replicationTLS() (*tls.Config, error) {
	if !c.TLSReplication {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCACertFile != "" {
		pool, err := loadCAs(c.TLSCACertFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	certFile, keyFile := c.TLSClientCertFile, c.TLSClientKeyFile
	if certFile == "" {
		certFile, keyFile = c.TLSCertFile, c.TLSKeyFile
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: replication client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
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
