package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/cellserver/cellserver/server"
)

// healthcheck connects to the server that cfg describes (on loopback when
// it listens on every interface), authenticates if a password is set, sends
// PING and expects PONG. It is what the container HEALTHCHECK runs.
func healthcheck(cfg server.Config, stdout io.Writer) error {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, port)
	var tc *tls.Config
	if cfg.TLSCertFile != "" {
		tc = &tls.Config{InsecureSkipVerify: true} // a local liveness probe, not a trust decision
		if cfg.TLSCACertFile != "" {
			cert, err := healthcheckCertificate(cfg)
			if err != nil {
				return err
			}
			tc.Certificates = []tls.Certificate{cert}
		}
	}
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	if tc != nil {
		conn = tls.Client(conn, tc)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	r := bufio.NewReader(conn)
	send := func(args ...string) (string, error) {
		msg := fmt.Sprintf("*%d\r\n", len(args))
		for _, a := range args {
			msg += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := io.WriteString(conn, msg); err != nil {
			return "", err
		}
		line, err := r.ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err
	}
	if cfg.Password != "" {
		if reply, err := send("AUTH", cfg.Password); err != nil || reply != "+OK" {
			return fmt.Errorf("AUTH: %q %v", reply, err)
		}
	}
	reply, err := send("PING")
	if err != nil {
		return err
	}
	if reply != "+PONG" {
		return fmt.Errorf("PING: %q", reply)
	}
	fmt.Fprintf(stdout, "ok %s\n", addr)
	return nil
}

// healthcheckCertificate returns the client certificate the health check
// presents to a server that requires one (--tls-ca-cert-file):
// --tls-client-cert-file when set, else the server certificate, as Redis
// does for its own outgoing connections. A server certificate whose
// extended key usage excludes client authentication (many CAs issue
// serverAuth only) would be refused by the server's verification, so it
// is refused here with the remedy instead of a TLS alert.
func healthcheckCertificate(cfg server.Config) (tls.Certificate, error) {
	if cfg.TLSClientCertFile != "" {
		return tls.LoadX509KeyPair(cfg.TLSClientCertFile, cfg.TLSClientKeyFile)
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return cert, err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return cert, err
	}
	if !clientAuthAllowed(leaf) {
		return cert, fmt.Errorf("--tls-ca-cert-file requires a client certificate and %s is not valid for client authentication "+
			"(its extended key usage lacks clientAuth): set --tls-client-cert-file and --tls-client-key-file "+
			"to a client certificate signed by a CA of --tls-ca-cert-file", cfg.TLSCertFile)
	}
	return cert, nil
}

// clientAuthAllowed reports whether crypto/x509's verification accepts c
// for client authentication: no extended key usage at all, clientAuth or
// any.
func clientAuthAllowed(c *x509.Certificate) bool {
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return true
	}
	for _, u := range c.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}
