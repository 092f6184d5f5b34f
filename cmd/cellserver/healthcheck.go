package main

import (
	"bufio"
	"crypto/tls"
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
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	if cfg.TLSCertFile != "" {
		tc := &tls.Config{InsecureSkipVerify: true} // a local liveness probe, not a trust decision
		if cfg.TLSCACertFile != "" {
			cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
			if err != nil {
				return err
			}
			tc.Certificates = []tls.Certificate{cert}
		}
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
