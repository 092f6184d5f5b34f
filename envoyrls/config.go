package envoyrls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/policy"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// Algorithm is how a rule counts. envoyproxy/ratelimit only has Fixed;
// the others are cellserver extensions (the rate_limit key "algorithm").
type Algorithm uint8

const (
	// Fixed is a fixed window aligned to multiples of the period since the
	// Unix epoch (CL.FIXED): envoyproxy/ratelimit's only algorithm.
	Fixed Algorithm = iota
	// Sliding is the sliding-window counter (CL.SLIDING).
	Sliding
	// SlidingLog is the exact sliding log (CL.SLIDINGLOG).
	SlidingLog
	// GCRA is the generic cell rate algorithm with a burst (CL.THROTTLE).
	GCRA
)

var algorithmNames = map[string]Algorithm{"fixed": Fixed, "sliding": Sliding, "slidinglog": SlidingLog, "gcra": GCRA}

func (a Algorithm) String() string {
	for n, v := range algorithmNames {
		if v == a {
			return n
		}
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// unitPeriods is envoyproxy/ratelimit's src/utils UnitToDivider: a month is
// 30 days and a year 365 days.
var unitPeriods = map[pb.RateLimitResponse_RateLimit_Unit]time.Duration{
	pb.RateLimitResponse_RateLimit_SECOND: time.Second,
	pb.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	pb.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	pb.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	pb.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	pb.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	pb.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// MaxPeriod is the longest period a rule may have (cellserver's limiter
// commands take at most 10 years).
const MaxPeriod = 10 * 365 * 24 * time.Hour

// Rule is one rate_limit block: what a descriptor that matches it is limited
// to. Rules are immutable once loaded.
type Rule struct {
	// FullKey is envoyproxy/ratelimit's name for the rule: the domain and
	// the path of key or key_value through the nesting, joined by dots
	// ("messaging.message_type_marketing.to_number").
	FullKey string
	// Name and Replaces are the rate_limit's name and replaces entries.
	Name     string
	Replaces []string
	// Unit and RequestsPerUnit are reported as the status's current_limit.
	// Unit is UNKNOWN for an extension period that is not a whole unit.
	Unit            pb.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32
	// Period is the window: the unit's length, or the extension "period".
	Period time.Duration
	// Algorithm and Burst are the cellserver extensions (Burst: GCRA only,
	// the extra requests allowed at once, CL.THROTTLE's max_burst).
	Algorithm Algorithm
	Burst     int64
	// Unlimited rules are answered OK without touching the keyspace.
	Unlimited bool
	// ShadowMode rules are counted but never make a descriptor OVER_LIMIT.
	ShadowMode bool
	// QuotaMode rules make the overall code OVER_LIMIT only when every
	// quota-mode descriptor of the request is over (envoyproxy/ratelimit's
	// quota_mode).
	QuotaMode bool
	// DetailedMetric gives the rule its own descriptor counts (Stats.Rules,
	// the metric cellserver_rls_rule_descriptors_total and INFO rls),
	// labelled by FullKey: values from the configuration only, never from
	// requests (envoyproxy/ratelimit puts the request's values in the
	// metric's name instead, without a bound).
	DetailedMetric bool
	// Audit, when set, appends the rule's decisions to an audit stream
	// as a policy's (docs/audit.md): the rate_limit's audit, audit_stream
	// (default "audit:<FullKey>"), audit_maxlen and audit_sample. Its Name
	// is FullKey, the entries' policy field. nil: audit off.
	Audit *policy.Policy
}

// node is one level of a domain's descriptor tree, as envoyproxy/ratelimit's
// rateLimitDescriptor: children by "key" or "key_value", plus the wildcard
// children in configuration order.
type node struct {
	children  map[string]*node
	wildcards []wildcard
	rule      *Rule
	// shareThreshold is the value pattern ("files/*") when the descriptor
	// has share_threshold: every value it matches shares one counter.
	shareThreshold string
}

type wildcard struct {
	key   string   // the child's map key, "key_pat*tern"
	parts []string // key split on "*"
}

// walk calls f for every rule at or below n.
func (n *node) walk(f func(*Rule)) {
	if n.rule != nil {
		f(n.rule)
	}
	for _, c := range n.children {
		c.walk(f)
	}
}

// Config is a loaded configuration: domains by name. The zero value has no
// domain. Safe for concurrent use (read only).
type Config struct {
	domains map[string]*node
}

// Domains returns the configured domain names, sorted.
func (c *Config) Domains() []string {
	var out []string
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// validKeys is envoyproxy/ratelimit's list (src/config/config_impl.go): a
// key outside it, at any level, is an error; a known key at a level where it
// means nothing is ignored, as there. algorithm, period, burst and the
// audit fields are cellserver's.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true,
	"algorithm": true, "period": true, "burst": true,
	"audit": true, "audit_stream": true, "audit_maxlen": true, "audit_sample": true,
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("envoyrls: invalid configuration")

// ConfigError lists every problem found in a configuration, each
// "file: problem" with envoyproxy/ratelimit's wording where it has one.
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	return "envoyrls: invalid configuration: " + strings.Join(e.Problems, "; ")
}

func (e *ConfigError) Unwrap() error { return ErrConfig }

// File is one configuration file's name (used in errors) and contents.
type File struct {
	Name string
	Data []byte
}

// LoadPath reads a YAML file, or every *.yaml and *.yml file of a
// directory (not its subdirectories; names starting with a dot are
// skipped), one domain per file, and parses them with Parse.
func LoadPath(path string) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &ConfigError{Problems: []string{err.Error()}}
	}
	var names []string
	if st.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, &ConfigError{Problems: []string{err.Error()}}
		}
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() || strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			names = append(names, filepath.Join(path, n))
		}
		sort.Strings(names)
	} else {
		names = []string{path}
	}
	var files []File
	var problems []string
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		files = append(files, File{Name: n, Data: b})
	}
	cfg, err := Parse(files...)
	if len(problems) > 0 {
		var ce *ConfigError
		if errors.As(err, &ce) {
			problems = append(problems, ce.Problems...)
		}
		return nil, &ConfigError{Problems: problems}
	}
	return cfg, err
}

// Parse builds a Config from files in envoyproxy/ratelimit's format, one
// domain per file. Every problem of every file is reported at once in a
// *ConfigError.
func Parse(files ...File) (*Config, error) {
	p := &parser{cfg: &Config{domains: map[string]*node{}}}
	for _, f := range files {
		p.file(f)
	}
	if len(p.problems) > 0 {
		return nil, &ConfigError{Problems: p.problems}
	}
	return p.cfg, nil
}

type parser struct {
	cfg      *Config
	problems []string
	name     string // the current file
}

func (p *parser) bad(format string, a ...any) {
	p.problems = append(p.problems, p.name+": "+fmt.Sprintf(format, a...))
}

func (p *parser) file(f File) {
	p.name = f.Name
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		p.bad("error loading config file: %v", err)
		return
	}
	if len(doc.Content) == 0 {
		p.bad("config file cannot have empty domain")
		return
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.bad("config error, the file is not a mapping (line %d)", root.Line)
		return
	}
	if !p.validateKeys(root) {
		return
	}
	domain := p.scalar(root, "domain")
	if domain == "" {
		p.bad("config file cannot have empty domain")
		return
	}
	if _, dup := p.cfg.domains[domain]; dup {
		p.bad("duplicate domain '%s' in config file", domain)
		return
	}
	d := &node{children: map[string]*node{}}
	p.descriptors(d, domain+".", get(root, "descriptors"))
	p.cfg.domains[domain] = d
}

// validateKeys checks every mapping key below n against validKeys, as
// envoyproxy/ratelimit's validateYamlKeys (metadata's contents are free).
func (p *parser) validateKeys(n *yaml.Node) bool {
	ok := true
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "") {
				p.bad("config error, key is not of type string: %v", k.Value)
				ok = false
				continue
			}
			if !validKeys[k.Value] {
				p.bad("config error, unknown key '%s'", k.Value)
				ok = false
				continue
			}
			if k.Value == "metadata" {
				continue
			}
			if v.Kind == yaml.SequenceNode {
				for _, e := range v.Content {
					if e.Kind != yaml.MappingNode {
						p.bad("config error, yaml file contains list of type other than map: %v", e.Value)
						ok = false
						continue
					}
					ok = p.validateKeys(e) && ok
				}
			} else if v.Kind == yaml.MappingNode {
				ok = p.validateKeys(v) && ok
			}
		}
	}
	return ok
}

func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// scalar returns a scalar's text as yaml.v2 gives it to a string field
// (value: 123 is "123"); empty for a missing or null key.
func (p *parser) scalar(m *yaml.Node, key string) string {
	v := get(m, key)
	if v == nil || v.Tag == "!!null" {
		return ""
	}
	if v.Kind != yaml.ScalarNode {
		p.bad("%s must be a string (line %d)", key, v.Line)
		return ""
	}
	return v.Value
}

func (p *parser) boolean(m *yaml.Node, key string) bool {
	v := get(m, key)
	if v == nil || v.Tag == "!!null" {
		return false
	}
	var b bool
	if v.Kind != yaml.ScalarNode || v.Decode(&b) != nil {
		p.bad("%s must be true or false, not %q (line %d)", key, v.Value, v.Line)
	}
	return b
}

func (p *parser) descriptors(parent *node, parentKey string, list *yaml.Node) {
	if list == nil || list.Tag == "!!null" {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.bad("descriptors must be a list (line %d)", list.Line)
		return
	}
	for _, d := range list.Content {
		key, value := p.scalar(d, "key"), p.scalar(d, "value")
		if key == "" {
			p.bad("descriptor has empty key")
			continue
		}
		finalKey := key
		if value != "" {
			finalKey += "_" + value
		}
		fullKey := parentKey + finalKey
		if _, dup := parent.children[finalKey]; dup {
			p.bad("duplicate descriptor composite key '%s'", fullKey)
			continue
		}
		n := &node{children: map[string]*node{}}
		if rl := get(d, "rate_limit"); rl != nil && rl.Tag != "!!null" {
			n.rule = p.rule(rl, fullKey, p.boolean(d, "shadow_mode"), p.boolean(d, "quota_mode"), p.boolean(d, "detailed_metric"))
		}
		p.boolean(d, "value_to_metric") // validated; metrics per value are not kept
		if p.boolean(d, "share_threshold") {
			if !strings.Contains(finalKey, "*") {
				p.bad("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", finalKey)
			} else {
				n.shareThreshold = value
			}
		}
		if strings.Contains(finalKey, "*") {
			parent.wildcards = append(parent.wildcards, wildcard{key: finalKey, parts: strings.Split(finalKey, "*")})
		}
		p.descriptors(n, fullKey+".", get(d, "descriptors"))
		parent.children[finalKey] = n
	}
}

func (p *parser) rule(rl *yaml.Node, fullKey string, shadow, quota, detailed bool) *Rule {
	if rl.Kind != yaml.MappingNode {
		p.bad("rate_limit must be a mapping (line %d)", rl.Line)
		return nil
	}
	r := &Rule{FullKey: fullKey, Name: p.scalar(rl, "name"), ShadowMode: shadow, QuotaMode: quota, DetailedMetric: detailed}
	r.Unlimited = p.boolean(rl, "unlimited")
	unitText := p.scalar(rl, "unit")
	uv, present := pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unitText)]
	validUnit := present && uv != int32(pb.RateLimitResponse_RateLimit_UNKNOWN)
	periodText := p.scalar(rl, "period")
	if v := get(rl, "requests_per_unit"); v != nil && v.Tag != "!!null" {
		n, err := strconv.ParseUint(v.Value, 10, 32)
		if v.Kind != yaml.ScalarNode || err != nil {
			p.bad("requests_per_unit must be an integer between 0 and 4294967295, not %q (line %d)", v.Value, v.Line)
		}
		r.RequestsPerUnit = uint32(n)
	}
	for _, e := range seq(get(rl, "replaces")) {
		name := p.scalar(e, "name")
		if name == "" {
			p.bad("should not have an empty replaces entry")
			continue
		}
		if name == r.Name {
			p.bad("replaces should not contain name of same descriptor")
			continue
		}
		r.Replaces = append(r.Replaces, name)
	}
	if a := p.scalar(rl, "algorithm"); a != "" {
		alg, ok := algorithmNames[strings.ToLower(a)]
		if !ok {
			p.bad("invalid algorithm '%s' at '%s' (fixed, sliding, slidinglog or gcra)", a, fullKey)
		}
		r.Algorithm = alg
	}
	if v := get(rl, "burst"); v != nil && v.Tag != "!!null" {
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil || n < 0 || n > 1<<40 {
			p.bad("burst must be an integer between 0 and %d, not %q (line %d)", int64(1)<<40, v.Value, v.Line)
		}
		if r.Algorithm != GCRA {
			p.bad("burst is only for algorithm gcra, at '%s'", fullKey)
		}
		r.Burst = n
	}
	p.audit(r, rl)
	switch {
	case r.Unlimited:
		if validUnit {
			p.bad("should not specify rate limit unit when unlimited")
		}
		if r.Audit != nil {
			p.bad("audit does not apply to an unlimited rule (it decides nothing), at '%s'", fullKey)
		}
		return r
	case periodText != "":
		if unitText != "" {
			p.bad("give either unit or period, not both, at '%s'", fullKey)
		}
		d, err := time.ParseDuration(periodText)
		if err != nil || d < time.Millisecond || d > MaxPeriod || d%time.Millisecond != 0 {
			p.bad("invalid period '%s' at '%s': a duration such as 250ms, 1.5s or 10m, whole milliseconds, at most %s", periodText, fullKey, MaxPeriod)
		}
		r.Period = d
		for u, up := range unitPeriods {
			if up == d {
				r.Unit = u
			}
		}
	case !validUnit:
		p.bad("invalid rate limit unit '%s'", unitText)
		return r
	default:
		r.Unit = pb.RateLimitResponse_RateLimit_Unit(uv)
		r.Period = unitPeriods[r.Unit]
	}
	if r.Algorithm == GCRA && r.Period%time.Second != 0 {
		p.bad("algorithm gcra needs a period of whole seconds, at '%s'", fullKey)
	}
	if r.Algorithm != Fixed && r.RequestsPerUnit == 0 {
		p.bad("requests_per_unit 0 is only for algorithm fixed, at '%s'", fullKey)
	}
	return r
}

// audit reads the rate_limit rl's audit fields into r.Audit, as a
// policy's (policy.NewAudit), reporting each problem.
func (p *parser) audit(r *Rule, rl *yaml.Node) {
	fields := map[string]*yaml.Node{}
	for _, f := range policy.AuditFieldNames {
		if v := get(rl, f); v != nil && v.Tag != "!!null" {
			fields[f] = v
		}
	}
	if len(fields) == 0 {
		return
	}
	a, problems := policy.NewAudit(r.FullKey, fields)
	for _, msg := range problems {
		p.bad("%s, at '%s'", msg, r.FullKey)
	}
	if a != nil {
		a.Shadow = r.ShadowMode // a refusal answered OK: shadow_limited
	}
	r.Audit = a
}

// Audits reports whether a rule of c audits its decisions.
func (c *Config) Audits() bool {
	found := false
	for _, n := range c.domains {
		n.walk(func(r *Rule) { found = found || r.Audit != nil })
	}
	return found
}

func seq(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}
