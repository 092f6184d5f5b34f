package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cellservertest"
)

// start runs the example's handler; its local parts (the deny cache) read
// the clock of s, as cellserver does.
func start(t *testing.T, s *cellservertest.Server, args ...string) *httptest.Server {
	t.Helper()
	o, lo, err := parse(append([]string{"--redis", s.Addr()}, args...))
	if err != nil {
		t.Fatal(err)
	}
	lo.Clock = s.Now
	h, rdb, err := handler(o, lo, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestFivePerTenSeconds: the example of docs/client.md, against an in-process
// cellserver whose clock stands still: five requests pass with the
// draft-11 headers, the sixth gets 429 with Retry-After; 2 s later (one
// unit of 5 per 10 s) one more passes.
func TestFivePerTenSeconds(t *testing.T) {
	s := cellservertest.Run(t)
	hs := start(t, s)
	for i := range 5 {
		resp := get(t, hs.URL+"/")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %s", i+1, resp.Status)
		}
		if p := resp.Header.Get("RateLimit-Policy"); p != `"per-ip";q=5;w=10` {
			t.Fatalf("RateLimit-Policy %q", p)
		}
		// GCRA: after i+1 of 5, r = 4-i; t = time until all 5 are back
		// = 2 s per unit used, in whole seconds.
		want := `"per-ip";r=` + string(rune('4'-i)) + `;t=` + []string{"2", "4", "6", "8", "10"}[i]
		if got := resp.Header.Get("RateLimit"); got != want {
			t.Fatalf("request %d: RateLimit %q, want %q", i+1, got, want)
		}
	}
	resp := get(t, hs.URL+"/")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("sixth request: %s, Retry-After %q; want 429 and 2", resp.Status, resp.Header.Get("Retry-After"))
	}
	s.Advance(2 * time.Second)
	if resp := get(t, hs.URL+"/"); resp.StatusCode != 200 {
		t.Fatalf("after 2 s: %s", resp.Status)
	}
}

// TestOnError: with cellserver stopped, --on-error closed answers
// 503 with Retry-After; open lets the request through.
func TestOnError(t *testing.T) {
	s := cellservertest.Run(t)
	closed := start(t, s, "--on-error", "closed")
	open := start(t, s, "--on-error", "open")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	resp := get(t, closed.URL+"/")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("closed: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	if resp := get(t, open.URL+"/"); resp.StatusCode != 200 {
		t.Fatalf("open: %s", resp.Status)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--on-error", "maybe"},
		{"--trusted-proxy", "10.0.0.0/33"},
		{"--local-share", "2", "--on-error", "local"},
		{"extra"},
	} {
		o, lo, err := parse(args)
		if err == nil {
			_, _, err = handler(o, lo, slog.New(slog.NewTextHandler(io.Discard, nil)))
		}
		if err == nil {
			t.Errorf("%s: accepted", strings.Join(args, " "))
		}
	}
}
