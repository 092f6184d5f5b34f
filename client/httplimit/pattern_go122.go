//go:build !go1.23

package httplimit

import "net/http"

// pattern: Go 1.22's Request has no Pattern.
func pattern(*http.Request) string { return "" }
