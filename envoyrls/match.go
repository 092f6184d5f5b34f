package envoyrls

import (
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Match is the rule a descriptor matched, and for each entry the value its
// counter is keyed by (the request's value, or the wildcard pattern of a
// share_threshold descriptor).
type Match struct {
	Rule   *Rule
	Values []string
}

// Lookup finds the rule for a descriptor of domain exactly as
// envoyproxy/ratelimit's GetLimit does (src/config/config_impl.go): at each
// level, first the child "key_value", then the first wildcard child whose
// pattern matches "key_value", then the child "key" alone; the rule counts
// only if it sits at the descriptor's last entry. It returns false when the
// domain is unknown or no rule applies.
func (c *Config) Lookup(domain string, entries []*rlv3.RateLimitDescriptor_Entry) (Match, bool) {
	return c.lookup(domain, entries, nil)
}

// lookup is Lookup with Match.Values in vals when it has room (the gRPC
// handler's buffer, reused from call to call), else in a new slice.
func (c *Config) lookup(domain string, entries []*rlv3.RateLimitDescriptor_Entry, vals []string) (Match, bool) {
	d := c.domains[domain]
	if d == nil {
		return Match{}, false
	}
	var m Match
	level := d
	var shared map[int]string
	for i, e := range entries {
		finalKey := e.GetKey() + "_" + e.GetValue()
		next := level.children[finalKey]
		viaWildcard := false
		if next == nil {
			for _, w := range level.wildcards {
				if wildcardMatch(w.parts, finalKey) {
					next, viaWildcard = level.children[w.key], true
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.GetKey()]
		}
		if viaWildcard && next != nil && next.shareThreshold != "" {
			if shared == nil {
				shared = map[int]string{}
			}
			shared[i] = next.shareThreshold
		}
		if next != nil && next.rule != nil && i == len(entries)-1 {
			m.Rule = next.rule
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		level = next
	}
	if m.Rule == nil {
		return Match{}, false
	}
	if cap(vals) >= len(entries) {
		m.Values = vals[:len(entries)]
	} else {
		m.Values = make([]string, len(entries))
	}
	for i, e := range entries {
		m.Values[i] = e.GetValue()
		if p, ok := shared[i]; ok {
			m.Values[i] = p
		}
	}
	return m, true
}

// known reports whether domain is configured.
func (c *Config) known(domain string) bool { return c.domains[domain] != nil }

// wildcardMatch is envoyproxy/ratelimit's: parts is the pattern split on
// "*", each "*" matching zero or more bytes, in order.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	if !strings.HasPrefix(value, parts[0]) || !strings.HasSuffix(value, parts[len(parts)-1]) {
		return false
	}
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if len(value) < total {
		return false
	}
	rest := value[len(parts[0]):]
	if last := parts[len(parts)-1]; last != "" {
		rest = rest[:len(rest)-len(last)]
	}
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
