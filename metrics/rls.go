package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellserver/cellserver/server"
)

// RLSCollector reports the Envoy rate limit service's counts (stats, e.g.
// server.Server.RLSStats): requests by result, and descriptors by domain
// and result, and by rule for the rules with detailed_metric. Label
// values come from the configuration only (domain names and rules' full
// keys), never from requests: the descriptors of an unknown domain count
// under domain "". Nothing is reported while stats answers false.
func RLSCollector(stats func() (server.RLSStats, bool)) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_rls_"+name, help, labels, nil)
	}
	return &rlsCollector{stats: stats,
		requests: d("requests_total", "ShouldRateLimit calls of the Envoy rate limit service, by result: ok, over_limit (the overall code), or error.", "result"),
		descriptors: d("descriptors_total", "Descriptors of the Envoy rate limit service's requests answered without error, by domain of the configuration "+
			"(\"\" for a domain not in it) and result: within_limit, over_limit, shadow_over_limit (over a shadow_mode rule's limit, answered OK), "+
			"unlimited, replaced, or no_rule.", "domain", "result"),
		rules: d("rule_descriptors_total", "Descriptors that matched a rule with detailed_metric: true, by domain, rule (its full key, as "+
			"envoyproxy/ratelimit's stat names) and result: within_limit, over_limit or shadow_over_limit.", "domain", "rule", "result"),
	}
}

type rlsCollector struct {
	stats                        func() (server.RLSStats, bool)
	requests, descriptors, rules *prometheus.Desc
}

func (c *rlsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.descriptors
	ch <- c.rules
}

func (c *rlsCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.stats()
	if !ok {
		return
	}
	counter(ch, c.requests, float64(st.OK), "ok")
	counter(ch, c.requests, float64(st.OverLimit), "over_limit")
	counter(ch, c.requests, float64(st.Errors), "error")
	for _, d := range st.Domains {
		for _, r := range descriptorResults(d) {
			counter(ch, c.descriptors, float64(r.n), d.Domain, r.name)
		}
	}
	counter(ch, c.descriptors, float64(st.UnknownDomain), "", "no_rule")
	for _, d := range st.Rules {
		for _, r := range descriptorResults(d)[:3] {
			counter(ch, c.rules, float64(r.n), d.Domain, d.Rule, r.name)
		}
	}
}

type namedCount struct {
	name string
	n    uint64
}

// descriptorResults are the results of c; a rule's are the first three
// (a descriptor that matched it is never unlimited, replaced or without a
// rule).
func descriptorResults(c server.RLSDescriptorCounts) []namedCount {
	return []namedCount{{"within_limit", c.WithinLimit}, {"over_limit", c.OverLimit}, {"shadow_over_limit", c.ShadowOverLimit},
		{"unlimited", c.Unlimited}, {"replaced", c.Replaced}, {"no_rule", c.NoRule}}
}
