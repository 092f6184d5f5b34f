package metrics

import (
	"net/http"

	"github.com/cellserver/cellserver/dashboard"
	"github.com/cellserver/cellserver/server"
)

// ServerHandler is the handler cmd/cellserver serves on --metrics-addr
// (server.Config.Metrics): src's counters at /metrics, with the
// replication collector, the persistence one when src has a store, and
// the probes /healthz and /readyz (see NewHandler), and the live page
// /dashboard with its /dashboard/state.json (package dashboard).
func ServerHandler(src server.MetricsSources) http.Handler {
	s := Sources{Commands: src.Commands, Network: src.Network, Clock: src.Clock}
	s.Extra = append(s.Extra, ReplicationCollector(src.Replication))
	if src.Writer != nil {
		s.Extra = append(s.Extra, PersistenceCollector(src.Writer, src.Store))
	}
	if src.RLS != nil {
		s.Extra = append(s.Extra, RLSCollector(src.RLS))
	}
	mux := http.NewServeMux()
	mux.Handle("/", NewHandler(NewRegistry(s), src.Ready))
	dashboard.Register(mux, src)
	return mux
}
