package httplimit

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP keys a request by its client's IP address. Without trusted
// prefixes it is the peer's address (r.RemoteAddr) and no header is read.
// When the peer is inside one of trusted (a proxy you run), the
// X-Forwarded-For header is walked from right to left past the addresses
// inside trusted; the first address outside them is the client. If every
// hop is trusted the leftmost is used; a hop that does not parse stops the
// walk at the last trusted address (the proxy that wrote it).
//
// Never trust a prefix a client can send from: a peer outside trusted
// cannot change the key with any header. Only X-Forwarded-For is read: a
// proxy that appends to X-Forwarded-For passes a client's Forwarded header
// through unchanged, so reading both would let the client choose its key.
// For RFC 7239 Forwarded, use ClientIPFrom("Forwarded", ...).
//
// IPv4-mapped IPv6 addresses are keyed as IPv4. ok is false only if
// RemoteAddr does not parse (a request not from a network listener).
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	return ClientIPFrom("X-Forwarded-For", trusted...)
}

// ClientIPFrom is ClientIP reading header instead of X-Forwarded-For:
// "Forwarded" is parsed as RFC 7239 (the for= parameter of each element);
// any other header as a comma-separated list of addresses, like
// X-Forwarded-For (e.g. "X-Real-IP" with one address). Name the one header
// your trusted proxies set.
func ClientIPFrom(header string, trusted ...netip.Prefix) KeyFunc {
	header = http.CanonicalHeaderKey(header)
	forwarded := header == "Forwarded"
	ts := make([]netip.Prefix, 0, len(trusted))
	for _, p := range trusted {
		ts = append(ts, p.Masked())
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range ts {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, bool) {
		peer, ok := parseHostPort(r.RemoteAddr)
		if !ok {
			return "", false
		}
		if len(ts) == 0 || !isTrusted(peer) {
			return peer.String(), true
		}
		client := peer
		values := r.Header[header]
		for v := len(values) - 1; v >= 0; v-- {
			elems := strings.Split(values[v], ",")
			for i := len(elems) - 1; i >= 0; i-- {
				var a netip.Addr
				var ok bool
				if forwarded {
					a, ok = forwardedFor(elems[i])
				} else {
					a, ok = parseHostPort(strings.TrimSpace(elems[i]))
				}
				if !ok {
					return client.String(), true
				}
				client = a
				if !isTrusted(a) {
					return a.String(), true
				}
			}
		}
		return client.String(), true
	}
}

// parseHostPort parses an address with or without a port, IPv6 possibly
// in brackets, and unmaps IPv4-mapped IPv6.
func parseHostPort(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// forwardedFor returns the address of the for= parameter of one Forwarded
// element (RFC 7239 §4: for=192.0.2.43, for="[2001:db8::1]:4711").
// "unknown", obfuscated identifiers and a missing for= do not parse.
func forwardedFor(elem string) (netip.Addr, bool) {
	for _, pair := range strings.Split(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(k, "for") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return parseHostPort(v)
	}
	return netip.Addr{}, false
}

// Header keys a request by the value of a header; the limit does not apply
// to a request without it. The value is the client's choice: use it only
// for a header your own infrastructure sets (an API key checked before).
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		v := r.Header.Get(name)
		return v, v != ""
	}
}

// Context keys a request by a non-empty string stored in its context
// under key (e.g. the user an authentication middleware put there); the
// limit does not apply to a request without one.
func Context(key any) KeyFunc {
	return func(r *http.Request) (string, bool) {
		v, ok := r.Context().Value(key).(string)
		return v, ok && v != ""
	}
}

// Route keys a request by r.Pattern, the ServeMux pattern that matched it
// (set only when the middleware wraps a handler registered on a ServeMux,
// not the ServeMux itself), else by method and path. Paths are chosen by
// clients: keyed by path, every distinct URL is its own key. Request.Pattern
// exists since Go 1.23: built with Go 1.22, Route keys by method and path
// only.
func Route() KeyFunc {
	return func(r *http.Request) (string, bool) {
		if p := pattern(r); p != "" {
			return p, true
		}
		return r.Method + " " + r.URL.Path, true
	}
}

// Global keys every request by the same key: one limit for the service.
func Global() KeyFunc {
	return func(*http.Request) (string, bool) { return "", true }
}

// Join keys a request by the keys of fs joined with "|" (e.g. ClientIP
// and Route: per client and route); the limit applies only if every f
// does.
func Join(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, bool) {
		var b strings.Builder
		for i, f := range fs {
			k, ok := f(r)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(k)
		}
		return b.String(), true
	}
}
