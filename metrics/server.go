package metrics

import (
	"net/http"

	"github.com/cellserver/cellserver/server"
)

// ServerHandler is the handler cmd/cellserver serves on --metrics-addr
// (server.Config.Metrics): src's counters at /metrics, with the
// replication collector, the persistence one when src has a store, and
// the probes /healthz and /readyz (see NewHandler).
func ServerHandler(src server.MetricsSources) http.Handler {
	s := Sources{Commands: src.Commands, Network: src.Network, Clock: src.Clock}
	s.Extra = append(s.Extra, ReplicationCollector(src.Replication))
	if src.Writer != nil {
		s.Extra = append(s.Extra, PersistenceCollector(src.Writer, src.Store))
	}
	if src.RLS != nil {
		s.Extra = append(s.Extra, RLSCollector(src.RLS))
	}
	return NewHandler(NewRegistry(s), src.Ready)
}
