package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
)

// basicAuth asks for HTTP basic authentication (RFC 7617) with user and
// password on every path of h but the probes /healthz and /readyz, which
// stay open so that an orchestrator's health checks need no secret and
// reveal nothing but up or down. A request without the right pair gets
// 401 with a WWW-Authenticate challenge. Both the name and the password
// are compared in constant time (over their SHA-256, so the lengths do
// not show either), and both always, so a timing does not tell a wrong
// user from a wrong password.
func basicAuth(h http.Handler, user, password string) http.Handler {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		u, p, ok := r.BasicAuth()
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
		if !ok || userOK&passOK != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="cellserver metrics", charset="UTF-8"`)
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "401 unauthorized: this listener needs --metrics-user and --metrics-password", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
