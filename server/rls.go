package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/cellserver/cellserver/commands"
	"log/slog"
	"net"
	"sync"
	"time"
)

// RLSSources is what Config.RLS builds the Envoy front door from.
type RLSSources struct {
	// RESPAddr is this server's own RESP address, on loopback when it
	// listens on every interface: the front door's commands go there, so
	// that persistence, replication and cluster routing apply to them.
	RESPAddr string
	// Password is Config.Password: the front door authenticates with it on
	// RESPAddr, and gRPC callers must send it as "authorization: Bearer
	// <password>" metadata.
	Password string
	// TLS is the RESP port's server TLS configuration (nil: plain), used
	// as is on the gRPC port: the same certificate, and client
	// certificates required when --tls-ca-cert-file is set.
	TLS *tls.Config
	// ClientTLS is how the front door dials RESPAddr (and, in cluster
	// mode, the other nodes); nil without TLS.
	ClientTLS *tls.Config
	// Cluster is Config.ClusterEnabled: keys are routed to their owners.
	Cluster bool
	// MaxClients is Config.MaxClients: the gRPC port serves at most this
	// many connections at once (counted apart from the RESP port's); the
	// next one is closed as it is accepted.
	MaxClients int
	// ConfigPath is Config.RLSConfig; ResponseHeaders Config.RLSResponseHeaders.
	ConfigPath      string
	ResponseHeaders bool
	Clock           func() time.Time
	Logger          *slog.Logger
	// Local opens an in-process client of this server's commands
	// (commands.Service.NewLocal): the front door decides the keys this
	// node owns through it, with no loopback hop. nil: every command goes
	// to RESPAddr.
	Local func() LocalClient
}

// ErrLocalClosed is LocalClient.Replies' error once the client is closed
// or its user removed (a connection would have been disconnected).
var ErrLocalClosed = commands.ErrLocalClosed

// LocalClient is an in-process client of the server's commands
// (commands.Local): Send runs a command through the dispatcher a RESP
// connection's commands run through, Replies lets the replies sent since
// the last call leave as a connection's would (sync-replicas, fsync
// always) and returns them, RESP2. For one goroutine at a time.
type LocalClient interface {
	Send(args [][]byte)
	Replies() ([]byte, error)
	Close()
}

// RLSServer is the running front door.
type RLSServer interface {
	// Serve answers on ln until Shutdown or Close.
	Serve(ln net.Listener) error
	// Shutdown stops accepting and lets calls under way finish, until ctx
	// ends; then it stops at once.
	Shutdown(ctx context.Context) error
	// Close stops at once.
	Close() error
}

// rlsState is the front door of a Server.
type rlsState struct {
	mu  sync.Mutex // guards ln, srv
	ln  net.Listener
	srv RLSServer
}

func (c Config) validateRLS() []error {
	var errs []error
	if c.RLSAddr == "" {
		if c.RLSConfig != "" {
			errs = append(errs, errors.New("rls-config needs rls-addr (the Envoy rate limit service is off without it)"))
		}
		return errs
	}
	if _, _, err := net.SplitHostPort(c.RLSAddr); err != nil {
		errs = append(errs, fmt.Errorf("rls-addr %q: %v", c.RLSAddr, err))
	}
	if c.RLSConfig == "" {
		errs = append(errs, fmt.Errorf("rls-addr %q: needs rls-config (a YAML file or directory in envoyproxy/ratelimit's format)", c.RLSAddr))
	}
	if c.RLS == nil {
		errs = append(errs, fmt.Errorf("rls-addr %q: Config.RLS is not set (e.g. envoyrls.New)", c.RLSAddr))
	}
	return errs
}

// RLSAddr returns the front door's address, or nil when it is off or
// before Listen.
func (s *Server) RLSAddr() net.Addr {
	s.rls.mu.Lock()
	defer s.rls.mu.Unlock()
	if s.rls.ln == nil {
		return nil
	}
	return s.rls.ln.Addr()
}

// listenRLS opens the front door's listener and builds it (loading its
// configuration: an invalid one fails Listen), once the RESP listener is
// open at respAddr.
func (s *Server) listenRLS(respAddr net.Addr) error {
	if s.cfg.RLSAddr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(respAddr.String())
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	srv, err := s.cfg.RLS(RLSSources{RESPAddr: net.JoinHostPort(host, port), Password: s.cfg.Password, TLS: s.tls,
		ClientTLS: s.clientTLS, Cluster: s.cfg.ClusterEnabled, MaxClients: s.cfg.MaxClients, ConfigPath: s.cfg.RLSConfig,
		ResponseHeaders: s.cfg.RLSResponseHeaders, Clock: s.cfg.Clock, Logger: s.cfg.Logger,
		Local: func() LocalClient { return s.cmds.NewLocal() }})
	if err != nil {
		return fmt.Errorf("rls: %w", err)
	}
	ln, err := net.Listen("tcp", s.cfg.RLSAddr)
	if err != nil {
		srv.Close()
		return fmt.Errorf("rls: %w", err)
	}
	s.rls.mu.Lock()
	s.rls.ln, s.rls.srv = ln, srv
	s.rls.mu.Unlock()
	return nil
}

// serveRLS starts answering on the front door's listener.
func (s *Server) serveRLS() {
	s.rls.mu.Lock()
	ln, srv := s.rls.ln, s.rls.srv
	s.rls.mu.Unlock()
	if srv == nil {
		return
	}
	s.cfg.Logger.Info("envoy rate limit service listening", "addr", ln.Addr().String(), "config", s.cfg.RLSConfig,
		"tls", s.tls != nil, "token", s.cfg.Password != "")
	go func() {
		if err := srv.Serve(ln); err != nil {
			s.cfg.Logger.Error("envoy rate limit service stopped", "err", err)
		}
	}()
}

func (s *Server) shutdownRLS(ctx context.Context) {
	s.rls.mu.Lock()
	srv := s.rls.srv
	s.rls.mu.Unlock()
	if srv != nil {
		_ = srv.Shutdown(ctx)
	}
}

func (s *Server) closeRLS() {
	s.rls.mu.Lock()
	srv := s.rls.srv
	s.rls.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// rlsClientTLS is how the front door dials this server's RESP port (and
// the other nodes of a cluster) when TLS is on: it presents m.client
// (--tls-client-cert-file, else the server certificate) when the port asks
// for client certificates; it verifies the peer's chain against m.cas
// (--tls-ca-cert-file) when set, without checking host names (the peers
// are this node and the nodes of its own topology), and does not verify
// it otherwise, as --healthcheck.
func rlsClientTLS(m tlsMaterial) *tls.Config {
	if m.server == nil {
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true} // the chain is checked below when a CA is given
	cfg.Certificates = m.client
	if pool := m.cas; pool != nil {
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("tls: no peer certificate")
			}
			certs := make([]*x509.Certificate, len(raw))
			for i, r := range raw {
				c, perr := x509.ParseCertificate(r)
				if perr != nil {
					return perr
				}
				certs[i] = c
			}
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter})
			return err
		}
	}
	return cfg
}

// ReloadRLS reads the front door's configuration (Config.RLSConfig) again
// and swaps it in whole, for a reload signal: an invalid configuration is
// refused with every problem, logged, and the one in use stays. It is a
// no-op when the front door is off or cannot reload.
func (s *Server) ReloadRLS() error {
	s.rls.mu.Lock()
	srv := s.rls.srv
	s.rls.mu.Unlock()
	r, ok := srv.(interface{ Reload(path string) error })
	if !ok {
		return nil
	}
	if err := r.Reload(s.cfg.RLSConfig); err != nil {
		s.cfg.Logger.Error("envoy rate limit service: configuration refused, the previous one stays", "path", s.cfg.RLSConfig, "err", err)
		return err
	}
	s.cfg.Logger.Info("envoy rate limit service: configuration reloaded", "path", s.cfg.RLSConfig)
	return nil
}

// RLSDescriptorCounts is what the descriptors of one domain of the front
// door's configuration (Rule empty), or of one of its rules with
// detailed_metric (Rule is the rule's full key), were answered since the
// server started. Each descriptor of a request answered without error
// counts once, under one of: within its limit, over it (OVER_LIMIT),
// over a shadow_mode rule's limit (answered OK), unlimited, replaced by
// another rule of the request, or without a rule.
type RLSDescriptorCounts struct {
	Domain, Rule                                                         string
	WithinLimit, OverLimit, ShadowOverLimit, Unlimited, Replaced, NoRule uint64
}

// RLSStats is the front door's counts (RLSStater).
type RLSStats struct {
	// Requests answered OK, OVER_LIMIT, or with an error.
	OK, OverLimit, Errors uint64
	// Domains and Rules are sorted by domain, then rule.
	Domains, Rules []RLSDescriptorCounts
	// UnknownDomain is the descriptors of requests whose domain is not in
	// the configuration (answered OK without a rule).
	UnknownDomain uint64
}

// RLSStater is an RLSServer that counts what it answers.
type RLSStater interface {
	RLSStats() RLSStats
}

// RLSStats returns the front door's counts; false when it is off or does
// not count.
func (s *Server) RLSStats() (RLSStats, bool) {
	s.rls.mu.Lock()
	srv := s.rls.srv
	s.rls.mu.Unlock()
	st, ok := srv.(RLSStater)
	if !ok {
		return RLSStats{}, false
	}
	return st.RLSStats(), true
}

// rlsInfo is INFO's rls section, as Redis's cmdstat lines: the requests,
// then one line per domain and per rule with detailed_metric.
func (s *Server) rlsInfo() []string {
	st, ok := s.RLSStats()
	if !ok {
		return nil
	}
	lines := []string{fmt.Sprintf("rls_requests:ok=%d,over_limit=%d,error=%d", st.OK, st.OverLimit, st.Errors),
		fmt.Sprintf("rls_unknown_domain:descriptors=%d", st.UnknownDomain)}
	line := func(name string, c RLSDescriptorCounts) string {
		return fmt.Sprintf("%s:within_limit=%d,over_limit=%d,shadow_over_limit=%d,unlimited=%d,replaced=%d,no_rule=%d",
			name, c.WithinLimit, c.OverLimit, c.ShadowOverLimit, c.Unlimited, c.Replaced, c.NoRule)
	}
	for _, d := range st.Domains {
		lines = append(lines, line("rls_domain_"+infoName(d.Domain), d))
	}
	for _, r := range st.Rules {
		lines = append(lines, line("rls_rule_"+infoName(r.Rule), r))
	}
	return lines
}

// infoName keeps an INFO field name on its line and unambiguous: bytes
// that are not printable ASCII, and ':' and ',', become '_'.
func infoName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c <= ' ' || c >= 0x7f || c == ':' || c == ',' {
			b[i] = '_'
		}
	}
	return string(b)
}
