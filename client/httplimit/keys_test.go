package httplimit

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	xff := ClientIP(proxies...)
	fwd := ClientIPFrom("Forwarded", proxies...)
	none := ClientIP()
	cases := []struct {
		name   string
		f      KeyFunc
		remote string
		hdr    []string // name, value pairs (repeated names add lines)
		want   string
	}{
		{"no proxy configured: XFF ignored", none, "192.0.2.1:5", []string{"X-Forwarded-For", "198.51.100.7"}, "192.0.2.1"},
		{"untrusted peer: XFF ignored", xff, "192.0.2.1:5", []string{"X-Forwarded-For", "198.51.100.7"}, "192.0.2.1"},
		{"untrusted peer: Forwarded ignored", fwd, "192.0.2.1:5", []string{"Forwarded", "for=198.51.100.7"}, "192.0.2.1"},
		{"trusted peer, no header", xff, "10.1.2.3:5", nil, "10.1.2.3"},
		{"trusted peer: XFF used", xff, "10.1.2.3:5", []string{"X-Forwarded-For", "198.51.100.7"}, "198.51.100.7"},
		{"chain: rightmost untrusted", xff, "10.1.2.3:5", []string{"X-Forwarded-For", "203.0.113.9, 198.51.100.7, 10.9.9.9"}, "198.51.100.7"},
		{"chain over two lines", xff, "10.1.2.3:5", []string{"X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "198.51.100.7, 10.9.9.9"}, "198.51.100.7"},
		{"spoofed leftmost entry loses", xff, "10.1.2.3:5", []string{"X-Forwarded-For", "1.1.1.1, 198.51.100.7"}, "198.51.100.7"},
		{"all trusted: leftmost", xff, "10.1.2.3:5", []string{"X-Forwarded-For", "10.0.0.1, 10.0.0.2"}, "10.0.0.1"},
		{"garbage stops at the last trusted hop", xff, "10.1.2.3:5", []string{"X-Forwarded-For", "198.51.100.7, bogus, 10.0.0.2"}, "10.0.0.2"},
		{"XFF entry with port", xff, "10.1.2.3:5", []string{"X-Forwarded-For", "198.51.100.7:8080"}, "198.51.100.7"},
		{"XFF ignores Forwarded (client-sent)", xff, "10.1.2.3:5", []string{"Forwarded", "for=1.1.1.1", "X-Forwarded-For", "198.51.100.7"}, "198.51.100.7"},
		{"Forwarded used", fwd, "10.1.2.3:5", []string{"Forwarded", "for=198.51.100.7;proto=https, for=10.0.0.2"}, "198.51.100.7"},
		{"Forwarded quoted IPv6 with port", fwd, "[2001:db8:ffff::1]:5", []string{"Forwarded", `For="[2001:db8::17]:4711"`}, "2001:db8::17"},
		{"Forwarded ignores XFF (client-sent)", fwd, "10.1.2.3:5", []string{"X-Forwarded-For", "1.1.1.1", "Forwarded", "for=198.51.100.7"}, "198.51.100.7"},
		{"Forwarded unknown stops", fwd, "10.1.2.3:5", []string{"Forwarded", "for=198.51.100.7, for=unknown"}, "10.1.2.3"},
		{"IPv4-mapped peer", xff, "[::ffff:10.1.2.3]:5", []string{"X-Forwarded-For", "198.51.100.7"}, "198.51.100.7"},
		{"IPv6 peer untrusted", xff, "[2001:db8::1]:5", []string{"X-Forwarded-For", "198.51.100.7"}, "2001:db8::1"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		for i := 0; i+1 < len(c.hdr); i += 2 {
			r.Header.Add(c.hdr[i], c.hdr[i+1])
		}
		k, ok := c.f(r)
		if !ok || k != c.want {
			t.Errorf("%s: %q %v, want %q", c.name, k, ok, c.want)
		}
	}
	t.Logf("%d cases", len(cases))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "pipe"
	if k, ok := xff(r); ok {
		t.Errorf("unparsable RemoteAddr: %q, want !ok", k)
	}
}

type ctxKey struct{}

func TestKeyFuncs(t *testing.T) {
	r := httptest.NewRequest("POST", "/a/b", nil)
	r.RemoteAddr = "192.0.2.1:5"
	r.Header.Set("X-Api-Key", "k1")
	if k, ok := Header("x-api-key")(r); !ok || k != "k1" {
		t.Errorf("Header: %q %v", k, ok)
	}
	if _, ok := Header("X-Other")(r); ok {
		t.Error("Header: absent header applies")
	}
	if _, ok := Context(ctxKey{})(r); ok {
		t.Error("Context: absent value applies")
	}
	ru := r.WithContext(context.WithValue(r.Context(), ctxKey{}, "alice"))
	if k, ok := Context(ctxKey{})(ru); !ok || k != "alice" {
		t.Errorf("Context: %q %v", k, ok)
	}
	if k, _ := Route()(r); k != "POST /a/b" {
		t.Errorf("Route: %q", k)
	}
	if k, ok := Join(ClientIP(), Route())(r); !ok || k != "192.0.2.1|POST /a/b" {
		t.Errorf("Join: %q %v", k, ok)
	}
	if _, ok := Join(ClientIP(), Context(ctxKey{}))(r); ok {
		t.Error("Join applies without every part")
	}
	if k, ok := Global()(r); !ok || k != "" {
		t.Errorf("Global: %q %v", k, ok)
	}
}
