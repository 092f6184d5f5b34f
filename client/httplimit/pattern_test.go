//go:build go1.23

package httplimit

import (
	"net/http/httptest"
	"testing"
)

// Route and Join with r.Pattern set (Go 1.23 and later).
func TestRoutePattern(t *testing.T) {
	r := httptest.NewRequest("POST", "/a/b", nil)
	r.RemoteAddr = "192.0.2.1:5"
	r.Pattern = "POST /a/{id}"
	if k, _ := Route()(r); k != "POST /a/{id}" {
		t.Errorf("Route with pattern: %q", k)
	}
	if k, ok := Join(ClientIP(), Route())(r); !ok || k != "192.0.2.1|POST /a/{id}" {
		t.Errorf("Join: %q %v", k, ok)
	}
}
