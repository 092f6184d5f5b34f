// Package metrics exposes cellserver's counters to Prometheus.
//
// Nothing here runs on the request path: the command, connection and
// keyspace layers keep their own counters, and a custom Collector reads
// them when /metrics is scraped. NewHandler also serves the liveness and
// readiness probes. ServerHandler is what a server serves
// (server.Config.Metrics): package server does not import this one, so a
// program links the Prometheus client only if it imports it.
package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/resp"
)

// Namespace prefixes every cellserver metric name.
const Namespace = "cellserver"

// MaxPrefixLabelLen is the longest key prefix, in bytes, reported as a
// label value; longer prefixes are cut at a rune boundary.
const MaxPrefixLabelLen = 128

// Sources is what the metrics read at scrape time (no work on the request
// path). Any nil field is skipped.
type Sources struct {
	// Commands gives the per-command, error, expiry and limited-prefix
	// counters.
	Commands *commands.Service
	// Network gives the connection counters; *resp.Server implements it.
	Network interface{ Stats() resp.Stats }
	// Keyspace is counted for the keys gauge; nil means Commands.Keyspace()
	// when Commands is set.
	Keyspace *keyspace.Keyspace
	// Clock decides which keys have expired when counting; nil means
	// time.Now.
	Clock func() time.Time
	// Ready reports readiness for /readyz; pass it to NewHandler. nil
	// means always ready.
	Ready func() bool
	// Extra collectors are registered alongside (e.g. persistence).
	Extra []prometheus.Collector
}

// NewRegistry returns a registry holding a collector that reads src on each
// scrape, the Go runtime and process collectors, and src.Extra.
func NewRegistry(src Sources) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		newCollector(src),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, c := range src.Extra {
		if c != nil {
			reg.MustRegister(c)
		}
	}
	return reg
}

// NewHandler serves reg on /metrics, liveness on /healthz (always 200 "ok")
// and readiness on /readyz (200 "ready" when ready() is true, 503 "not
// ready" otherwise; a nil ready is always ready).
func NewHandler(reg *prometheus.Registry, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// One broken metric must not hide all the others.
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready == nil || ready() {
			writeText(w, http.StatusOK, "ready")
			return
		}
		writeText(w, http.StatusServiceUnavailable, "not ready")
	})
	return mux
}

func writeText(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write([]byte(body))
}

// collector turns the sources' snapshots into constant metrics.
type collector struct {
	src Sources

	commands, cmdErrors, cmdRejected *prometheus.Desc
	duration, decisions              *prometheus.Desc
	errors, expired                  *prometheus.Desc
	prefixTop, prefixUntracked       *prometheus.Desc
	keys                             *prometheus.Desc
	clients, conns, rejectedConns    *prometheus.Desc
	protoErrors, netIn, netOut       *prometheus.Desc
	stateMem, maxMem, evicted, oom   *prometheus.Desc
	policyDecisions, policyAudit     *prometheus.Desc
}

func newCollector(src Sources) *collector {
	if src.Keyspace == nil && src.Commands != nil {
		src.Keyspace = src.Commands.Keyspace()
	}
	if src.Clock == nil {
		src.Clock = time.Now
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
	}
	return &collector{
		src:         src,
		commands:    d("commands_total", "Commands executed, by command (subcommands as \"parent|sub\").", "command"),
		cmdErrors:   d("command_errors_total", "Commands executed that replied with an error, by command.", "command"),
		cmdRejected: d("command_rejected_total", "Commands refused before running (wrong arity, authentication, ...), by command.", "command"),
		duration:    d("command_duration_seconds", "Time spent executing commands, by command.", "command"),
		decisions:   d("limiter_decisions_total", "Rate-limiter decisions, by limiter command and result (allowed or limited).", "command", "result"),
		errors:      d("errors_total", "Error replies, by error code (the reply's first word, e.g. ERR, WRONGTYPE).", "code"),
		expired:     d("expired_keys_total", "Keys removed by the active-expiry sweep."),
		prefixTop: d("limited_key_prefix_top",
			"Limited decisions in the last complete interval for each of the most-limited key prefixes (the key up to the first separator; keys without one count under \"(none)\").", "prefix"),
		prefixUntracked: d("limited_key_prefix_untracked",
			"Limited decisions in the last complete interval whose key prefix did not fit the bounded prefix table."),
		keys:          d("keys", "Live keys, by database and kind (only non-zero combinations).", "db", "kind"),
		clients:       d("connected_clients", "Client connections being served now."),
		conns:         d("connections_total", "Client connections accepted and served (refused ones excluded)."),
		rejectedConns: d("rejected_connections_total", "Client connections refused because the maximum number of clients was reached."),
		protoErrors:   d("protocol_errors_total", "Clients closed for a malformed or over-limit request."),
		netIn:         d("net_input_bytes_total", "Bytes read from clients."),
		netOut:        d("net_output_bytes_total", "Bytes written to clients."),
		stateMem:      d("state_memory_bytes", "Estimated memory of the limiter state (keys, values, objects), the figure maxmemory caps."),
		maxMem:        d("maxmemory_bytes", "The configured maxmemory (0: no cap)."),
		evicted:       d("evicted_keys_total", "Keys evicted to stay under maxmemory (allkeys-lru)."),
		oom:           d("oom_refusals_total", "Commands refused because maxmemory was reached (noeviction)."),
		policyDecisions: d("policy_decisions_total",
			"CL.APPLY decisions by policy of the policy file and result: allowed, limited, or shadow_limited (refused by a shadow policy or companion, replied or not counted as allowed).", "policy", "result"),
		policyAudit: d("policy_audit_entries_total",
			"Audit entries of the policies that audit, by policy and result: appended to the audit stream, or dropped (dropped_wrongtype: the audit key holds another type; dropped_oom: maxmemory with noeviction; dropped_id: the stream's last ID is the greatest possible).", "policy", "result"),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.commands, c.cmdErrors, c.cmdRejected, c.duration, c.decisions,
		c.errors, c.expired, c.prefixTop, c.prefixUntracked, c.keys,
		c.clients, c.conns, c.rejectedConns, c.protoErrors, c.netIn, c.netOut,
		c.stateMem, c.maxMem, c.evicted, c.oom, c.policyDecisions, c.policyAudit,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if c.src.Commands != nil {
		c.collectCommands(ch, c.src.Commands.Stats())
	}
	if c.src.Network != nil {
		st := c.src.Network.Stats()
		gauge(ch, c.clients, float64(st.ConnectedClients))
		counter(ch, c.conns, float64(st.TotalConnections))
		counter(ch, c.rejectedConns, float64(st.RejectedConnections))
		counter(ch, c.protoErrors, float64(st.ProtocolErrors))
		counter(ch, c.netIn, float64(st.NetInputBytes))
		counter(ch, c.netOut, float64(st.NetOutputBytes))
	}
	if ks := c.src.Keyspace; ks != nil {
		now := c.src.Clock().UnixMilli()
		for i := range ks.NumDB() {
			st := ks.DB(i).Stats(now, false)
			if st.Keys == 0 {
				continue
			}
			db := strconv.Itoa(i)
			for k, n := range st.ByKind {
				if n != 0 {
					gauge(ch, c.keys, float64(n), db, keyspace.Kind(k).String())
				}
			}
		}
	}
}

func (c *collector) collectCommands(ch chan<- prometheus.Metric, st commands.Stats) {
	for _, cs := range st.Commands {
		counter(ch, c.commands, float64(cs.Calls), cs.Name)
		counter(ch, c.cmdErrors, float64(cs.Failed), cs.Name)
		counter(ch, c.cmdRejected, float64(cs.Rejected), cs.Name)
		if n := len(commands.LatencyBuckets); len(cs.Buckets) == n+1 {
			buckets := make(map[float64]uint64, n)
			for i, le := range commands.LatencyBuckets {
				buckets[le] = cs.Buckets[i]
			}
			// The +Inf bucket is the count: the histogram stays consistent
			// even if a call lands between the reads of Calls and Buckets.
			send(ch, c.duration, func() (prometheus.Metric, error) {
				return prometheus.NewConstHistogram(c.duration, cs.Buckets[n], cs.Sum, buckets, cs.Name)
			})
		}
		if cs.Limiter {
			counter(ch, c.decisions, float64(cs.Allowed), cs.Name, "allowed")
			counter(ch, c.decisions, float64(cs.Limited), cs.Name, "limited")
		}
	}
	for code, n := range st.Errors {
		counter(ch, c.errors, float64(n), code)
	}
	counter(ch, c.expired, float64(st.ExpiredKeys))
	gauge(ch, c.stateMem, float64(st.StateMemory))
	gauge(ch, c.maxMem, float64(st.MaxMemory))
	counter(ch, c.evicted, float64(st.EvictedKeys))
	counter(ch, c.oom, float64(st.OOMRefusals))
	for _, p := range prefixLabels(st.LimitedPrefix) {
		gauge(ch, c.prefixTop, float64(p.Count), p.Prefix)
	}
	gauge(ch, c.prefixUntracked, float64(st.LimitedDropped))
	// One series per policy and result: the names are bounded by the
	// policy file (policy.MaxPolicies) and valid label values.
	for _, p := range st.Policies {
		counter(ch, c.policyDecisions, float64(p.Allowed), p.Name, "allowed")
		counter(ch, c.policyDecisions, float64(p.Limited), p.Name, "limited")
		counter(ch, c.policyDecisions, float64(p.ShadowLimited), p.Name, "shadow_limited")
		if p.Audit {
			counter(ch, c.policyAudit, float64(p.AuditAppended), p.Name, "appended")
			counter(ch, c.policyAudit, float64(p.AuditWrongType), p.Name, "dropped_wrongtype")
			counter(ch, c.policyAudit, float64(p.AuditOOM), p.Name, "dropped_oom")
			counter(ch, c.policyAudit, float64(p.AuditIDExhausted), p.Name, "dropped_id")
		}
	}
}

// prefixLabels makes key prefixes valid, bounded label values: invalid
// UTF-8 becomes U+FFFD and long prefixes are cut to MaxPrefixLabelLen.
// Prefixes that end up equal are merged so no series is duplicated.
func prefixLabels(in []commands.PrefixCount) []commands.PrefixCount {
	out := make([]commands.PrefixCount, 0, len(in))
	idx := make(map[string]int, len(in))
	for _, p := range in {
		l := labelValue(p.Prefix)
		if i, ok := idx[l]; ok {
			out[i].Count += p.Count
			continue
		}
		idx[l] = len(out)
		out = append(out, commands.PrefixCount{Prefix: l, Count: p.Count})
	}
	return out
}

func labelValue(s string) string {
	if len(s) > MaxPrefixLabelLen {
		s = s[:MaxPrefixLabelLen]
		// Drop a rune cut in half (valid UTF-8 runes are at most 4 bytes).
		for i := 0; i < utf8.UTFMax-1 && len(s) > 0; i++ {
			if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
				break
			}
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	send(ch, d, func() (prometheus.Metric, error) {
		return prometheus.NewConstMetric(d, prometheus.CounterValue, v, labels...)
	})
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	send(ch, d, func() (prometheus.Metric, error) {
		return prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
	})
}

// send emits the metric mk builds, or an invalid metric carrying its error
// (reported by the registry without failing the whole scrape).
func send(ch chan<- prometheus.Metric, d *prometheus.Desc, mk func() (prometheus.Metric, error)) {
	m, err := mk()
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}
