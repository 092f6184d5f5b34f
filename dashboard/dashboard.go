// Package dashboard serves a live page of one node on the metrics
// listener: GET /dashboard (one self-contained HTML page, its script and
// style inline, embedded in the binary: nothing is loaded from elsewhere)
// and GET /dashboard/state.json (State, which the page polls once a
// second). It answers "who is being limited, by which rule, since when"
// without a Prometheus: decisions per policy, refusal ratios against the
// shipped alert threshold, the most limited key prefixes, command latency,
// clients, memory, persistence, replication and cluster slots.
//
// Everything it shows is read from counters the server keeps for INFO
// and /metrics; no key is visited, so a request costs the same on an
// empty node as on one with millions of keys. The history the charts draw
// is kept by the page, from the snapshots it polled.
package dashboard

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/cellserver/cellserver/server"
)

//go:embed page.html
var page []byte

// PageBytes is the size of the page GET /dashboard serves.
func PageBytes() int { return len(page) }

// pageCSP forbids the page any other origin: scripts and styles only
// inline, requests only to its own origin.
const pageCSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Register adds GET /dashboard and GET /dashboard/state.json, read from
// src, to mux.
func Register(mux *http.ServeMux, src server.MetricsSources) {
	clock := src.Clock
	if clock == nil {
		clock = time.Now
	}
	mux.HandleFunc("GET /dashboard", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(len(page)))
		h.Set("Content-Security-Policy", pageCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		w.Write(page)
	})
	mux.HandleFunc("GET /dashboard/state.json", func(w http.ResponseWriter, r *http.Request) {
		b, err := json.Marshal(Snapshot(src, clock()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(b)
	})
}
