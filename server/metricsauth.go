package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
)

// metricsCredentials returns the check of the metrics listener's basic
// authentication: the --metrics-user/--metrics-password pair, compared in
// constant time (over their SHA-256, so the lengths do not show either;
// both always, so a timing does not tell a wrong user from a wrong
// password), then, with --metrics-acl, an ACL user that has a password
// and may run INFO (what the dashboard and /metrics show is what INFO
// shows).
func (s *Server) metricsCredentials() func(user, pass string) (authenticated, permitted bool) {
	pairSet := s.cfg.MetricsUser != ""
	wantUser, wantPass := sha256.Sum256([]byte(s.cfg.MetricsUser)), sha256.Sum256([]byte(s.cfg.MetricsPassword))
	acl := s.cfg.MetricsACL
	return func(user, pass string) (bool, bool) {
		if pairSet {
			gotUser, gotPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
			userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
			passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
			if userOK&passOK == 1 {
				return true, true
			}
		}
		if acl {
			return s.cmds.CheckUser(user, pass, "info")
		}
		return false, false
	}
}

// basicAuth asks for HTTP basic authentication (RFC 7617) on every path
// of h but the probes /healthz and /readyz, which stay open so that an
// orchestrator's health checks need no secret and reveal nothing but up
// or down. A request without credentials that check accepts gets 401 with
// a WWW-Authenticate challenge; one whose user is authenticated but not
// permitted, 403.
func basicAuth(h http.Handler, check func(user, pass string) (authenticated, permitted bool)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		u, p, ok := r.BasicAuth()
		authenticated, permitted := false, false
		if ok {
			authenticated, permitted = check(u, p)
		}
		switch {
		case !authenticated:
			w.Header().Set("WWW-Authenticate", `Basic realm="cellserver metrics", charset="UTF-8"`)
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "401 unauthorized: this listener needs the --metrics-user pair or, with --metrics-acl, an ACL user", http.StatusUnauthorized)
		case !permitted:
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "403 forbidden: this ACL user may not run INFO", http.StatusForbidden)
		default:
			h.ServeHTTP(w, r)
		}
	})
}
