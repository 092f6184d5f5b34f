//go:build go1.23

package httplimit

import "net/http"

// pattern returns r.Pattern (Go 1.23 and later).
func pattern(r *http.Request) string { return r.Pattern }
