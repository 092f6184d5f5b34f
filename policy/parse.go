package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/limiter"
	"gopkg.in/yaml.v3"
)

// raw is one policy as written, before the names are resolved.
type raw struct {
	p         *Policy
	line      int
	members   []rawMember
	companion string
	compKey   string
	compLine  int
	hasKey    bool // shadow_companion_key given
	bad       bool // a problem was reported: do not resolve further
}

type rawMember struct {
	policy string
	key    string
	line   int
}

type parser struct {
	problems []Problem
}

func (ps *parser) add(line int, policy, format string, args ...any) {
	ps.problems = append(ps.problems, Problem{Line: line, Policy: policy, Msg: fmt.Sprintf(format, args...)})
}

// Parse reads a policy file (YAML) and returns its policies, or an *Error
// listing every problem found (never only the first). The file is a
// mapping with one key, policies, holding a list of policies; see the
// package documentation for the format.
func Parse(src []byte) (*Set, error) {
	ps := &parser{}
	if len(src) > MaxFileBytes {
		ps.add(0, "", "the file has %d bytes, more than the %d allowed", len(src), MaxFileBytes)
		return nil, &Error{ps.problems}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		ps.add(0, "", "not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil, &Error{ps.problems}
	}
	set := &Set{byName: map[string]*Policy{}}
	if len(doc.Content) == 0 { // an empty file: no policies
		return set, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		ps.add(root.Line, "", "the file must be a mapping with the key \"policies\"")
		return nil, &Error{ps.problems}
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "policies" {
			ps.add(k.Line, "", "unknown key %q at the top (only \"policies\")", k.Value)
			continue
		}
		list = v
	}
	var raws []*raw
	if list != nil && !(list.Kind == yaml.ScalarNode && list.Tag == "!!null") {
		if list.Kind != yaml.SequenceNode {
			ps.add(list.Line, "", "\"policies\" must be a list of policies")
		} else {
			if len(list.Content) > MaxPolicies {
				ps.add(list.Line, "", "%d policies, more than the %d allowed", len(list.Content), MaxPolicies)
			}
			for _, n := range list.Content {
				if r := ps.policy(n); r != nil {
					raws = append(raws, r)
				}
			}
		}
	}
	// Names: unique.
	first := map[string]*raw{}
	for _, r := range raws {
		if r.p.Name == "" {
			continue
		}
		if f, dup := first[r.p.Name]; dup {
			ps.add(r.line, r.p.Name, "the name is already used by the policy at line %d", f.line)
			r.bad = true
			continue
		}
		first[r.p.Name] = r
	}
	ps.resolve(raws, first)
	if len(ps.problems) > 0 {
		sortProblems(ps.problems)
		return nil, &Error{ps.problems}
	}
	for _, r := range raws {
		set.byName[r.p.Name] = r.p
		set.list = append(set.list, r.p)
	}
	sortPolicies(set.list)
	for _, p := range set.list {
		p.Counts = new(Counts)
	}
	return set, nil
}

var paramKeys = map[string]bool{"burst": true, "count": true, "limit": true, "period": true, "lease": true}

// algoParams lists the parameters each algorithm takes, all required
// except GCRA's burst (default 0).
var algoParams = map[Algorithm][]string{
	GCRA:        {"burst", "count", "period"},
	Fixed:       {"limit", "period"},
	Sliding:     {"limit", "period"},
	SlidingLog:  {"limit", "period"},
	Concurrency: {"limit", "lease"},
}

func algorithmNamed(s string) (Algorithm, bool) {
	for i, n := range algoNames {
		if n == s && Algorithm(i) != Hierarchy {
			return Algorithm(i), true
		}
	}
	return 0, false
}

// policy reads one list entry; nil if it is not even a mapping.
func (ps *parser) policy(n *yaml.Node) *raw {
	if n.Kind != yaml.MappingNode {
		ps.add(n.Line, "", "a policy must be a mapping (name, algorithm, ...)")
		return nil
	}
	r := &raw{p: &Policy{Line: n.Line, AuditMaxLen: DefaultAuditMaxLen, AuditSample: 1}, line: n.Line}
	p := r.p
	// The name first, so every other problem can say which policy.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" {
			v := n.Content[i+1]
			if v.Kind != yaml.ScalarNode || !validName(v.Value) {
				ps.add(v.Line, "", "invalid policy name %q: 1 to %d letters, digits, '_', '-' or '.'", v.Value, MaxNameLen)
				r.bad = true
			} else {
				p.Name = v.Value
			}
		}
	}
	name := p.Name
	if name == "" && !r.bad {
		ps.add(n.Line, "", "a policy has no name")
		r.bad = true
	}
	var algoNode, allNode, overNode *yaml.Node
	got := map[string]*yaml.Node{}
	if ps.dupFields(n, name) {
		r.bad = true
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
		case "algorithm":
			algoNode = v
		case "all":
			allNode = v
		case "overrides":
			overNode = v
		case "shadow":
			b, ok := boolOf(v)
			if !ok {
				ps.add(v.Line, name, "shadow must be true or false, not %q", v.Value)
				r.bad = true
			}
			p.Shadow = b
		case "shadow_companion":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				ps.add(v.Line, name, "shadow_companion must name a policy")
				r.bad = true
			} else {
				r.companion, r.compLine = v.Value, v.Line
			}
		case "shadow_companion_key":
			if s, ok := ps.template(v, name); ok {
				r.compKey, r.hasKey = s, true
			} else {
				r.bad = true
			}
		case "audit", "audit_stream", "audit_maxlen", "audit_sample":
			if !ps.audit(p, k.Value, v, name) {
				r.bad = true
			}
		case "description":
			if v.Kind != yaml.ScalarNode {
				ps.add(v.Line, name, "description must be a string")
			}
			p.Description = v.Value
		default:
			if paramKeys[k.Value] {
				got[k.Value] = v
				continue
			}
			ps.add(k.Line, name, "unknown field %q", k.Value)
			r.bad = true
		}
	}
	switch {
	case allNode != nil && algoNode != nil:
		ps.add(algoNode.Line, name, "a policy has either an algorithm or a list of members (all), not both")
		r.bad = true
	case allNode != nil:
		p.Algorithm = Hierarchy
		r.members = ps.members(allNode, name)
		for k, v := range got {
			ps.add(v.Line, name, "%s does not apply to a hierarchy (all)", k)
			r.bad = true
		}
		if overNode != nil {
			ps.add(overNode.Line, name, "overrides do not apply to a hierarchy (give them to its members)")
			r.bad = true
		}
		if r.companion != "" {
			ps.add(r.compLine, name, "a hierarchy cannot have a shadow_companion (give one to its members)")
			r.bad = true
		}
	case algoNode == nil:
		ps.add(n.Line, name, "no algorithm (gcra, fixed, sliding, sliding_log, concurrency) and no members (all)")
		r.bad = true
	default:
		a, ok := algorithmNamed(algoNode.Value)
		if !ok || algoNode.Kind != yaml.ScalarNode {
			ps.add(algoNode.Line, name, "unknown algorithm %q (gcra, fixed, sliding, sliding_log, concurrency)", algoNode.Value)
			r.bad = true
			break
		}
		p.Algorithm = a
		var ok2 bool
		p.Params, ok2 = ps.params(a, got, nil, name, n.Line)
		if !ok2 {
			r.bad = true
		}
		if overNode != nil {
			p.Overrides = ps.overrides(a, p.Params, overNode, name)
			p.indexOverrides()
		}
	}
	if r.hasKey && r.companion == "" {
		ps.add(n.Line, name, "shadow_companion_key without shadow_companion")
		r.bad = true
	}
	if p.AuditStream == "" {
		p.AuditStream = DefaultAuditPrefix + name
	}
	p.setAuditCut()
	return r
}

// audit reads one of the audit fields (field) of policy p into p; it
// reports a problem and returns false if v is not valid.
func (ps *parser) audit(p *Policy, field string, v *yaml.Node, name string) bool {
	if msg := p.auditField(field, v); msg != "" {
		ps.add(v.Line, name, "%s", msg)
		return false
	}
	return true
}

// AuditFieldNames are the names of a policy's audit fields, as the policy
// file (and an Envoy rate limit rule) writes them.
var AuditFieldNames = []string{"audit", "audit_stream", "audit_maxlen", "audit_sample"}

// NewAudit returns the audit settings of something that decides outside
// the policy file (an Envoy rate limit rule, named name in the entries):
// fields are its audit fields by name (AuditFieldNames; missing ones take
// their defaults, audit_stream "audit:<name>"). It returns nil when the
// audit is off, and every problem found (the policy file's texts).
func NewAudit(name string, fields map[string]*yaml.Node) (*Policy, []string) {
	p := &Policy{Name: name, AuditMaxLen: DefaultAuditMaxLen, AuditSample: 1}
	var problems []string
	for _, f := range AuditFieldNames {
		if v := fields[f]; v != nil {
			if msg := p.auditField(f, v); msg != "" {
				problems = append(problems, msg)
			}
		}
	}
	if p.AuditStream == "" {
		p.AuditStream = DefaultAuditPrefix + name
	}
	p.setAuditCut()
	if len(problems) > 0 || p.Audit == AuditOff {
		return nil, problems
	}
	return p, nil
}

// auditField reads one audit field into p; it returns the problem, or "".
func (p *Policy) auditField(field string, v *yaml.Node) string {
	if v.Kind != yaml.ScalarNode {
		return field + " must be a scalar"
	}
	switch field {
	case "audit":
		for i, n := range auditNames {
			if v.Value == n {
				p.Audit = AuditMode(i)
				return ""
			}
		}
		if b, ok := boolOf(v); ok && !b { // YAML's off is a boolean
			p.Audit = AuditOff
			return ""
		}
		return fmt.Sprintf("audit must be off, limited or all, not %q", v.Value)
	case "audit_stream":
		switch {
		case v.Value == "":
			return "audit_stream must name a key"
		case len(v.Value) > MaxPatternLen:
			return fmt.Sprintf("audit_stream is longer than %d bytes", MaxPatternLen)
		case strings.Contains(v.Value, KeyVar):
			return fmt.Sprintf("audit_stream is one key for the whole policy: it takes no %q", KeyVar)
		}
		p.AuditStream = v.Value
	case "audit_maxlen":
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil || n < 1 || n > MaxAuditMaxLen {
			return fmt.Sprintf("audit_maxlen must be an integer within 1 and %d, not %q", MaxAuditMaxLen, v.Value)
		}
		p.AuditMaxLen = n
	case "audit_sample":
		f, err := strconv.ParseFloat(v.Value, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return fmt.Sprintf("audit_sample must be a number within 0 (excluded) and 1, not %q", v.Value)
		}
		p.AuditSample = f
	}
	return ""
}

// params reads algorithm a's parameters from got; base, when not nil,
// supplies the ones got lacks (an override), and then at least one must
// be given. It reports each problem and returns false if there was one.
func (ps *parser) params(a Algorithm, got map[string]*yaml.Node, base *Params, name string, line int) (Params, bool) {
	ok := true
	var out Params
	if base != nil {
		out = *base
		if len(got) == 0 {
			ps.add(line, name, "an override must set at least one parameter of %s (%s)", a, strings.Join(algoParams[a], ", "))
			return out, false
		}
	}
	allowed := algoParams[a]
	for k, v := range got {
		if !contains(allowed, k) {
			ps.add(v.Line, name, "%s does not apply to algorithm %s (it takes %s)", k, a, strings.Join(allowed, ", "))
			ok = false
		}
	}
	for _, k := range allowed {
		v := got[k]
		if v == nil {
			if base == nil && !(a == GCRA && k == "burst") {
				ps.add(line, name, "%s is required for algorithm %s", k, a)
				ok = false
			}
			continue
		}
		switch k {
		case "period", "lease":
			d, msg := durationOf(v)
			if msg != "" {
				ps.add(v.Line, name, "%s: %s", k, msg)
				ok = false
				continue
			}
			out.Period = d
		default:
			n, err := strconv.ParseInt(v.Value, 10, 64)
			if v.Kind != yaml.ScalarNode || err != nil {
				ps.add(v.Line, name, "%s must be an integer, not %q", k, v.Value)
				ok = false
				continue
			}
			switch k {
			case "burst":
				if n < 0 {
					ps.add(v.Line, name, "burst must not be negative")
					ok = false
				}
				out.Burst = n
			case "count":
				if n < 1 {
					ps.add(v.Line, name, "count must be a positive integer")
					ok = false
				}
				out.Count = n
			case "limit":
				switch {
				case limiter.CheckLimit(n) != nil:
					ps.add(v.Line, name, "limit must be a positive integer")
					ok = false
				case a == Sliding && n > limiter.MaxSlidingLimit:
					ps.add(v.Line, name, "limit of a sliding policy must be at most %d", int64(limiter.MaxSlidingLimit))
					ok = false
				case a == Concurrency && n > limiter.MaxLeases:
					ps.add(v.Line, name, "limit of a concurrency policy must be at most %d", limiter.MaxLeases)
					ok = false
				}
				out.Limit = n
			}
		}
	}
	if ok && a == GCRA && float64(out.Period)/float64(out.Count) < 1 {
		ps.add(line, name, "count %d per period %s is a zero rate (more than one per nanosecond)", out.Count, FormatDuration(out.Period))
		ok = false
	}
	return out, ok
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// durationOf reads a duration as cellserver's commands take a period: an
// integer number of seconds, or a Go duration with a unit (250ms, 1.5s,
// 10m, 1h), within (0, 10 years].
func durationOf(v *yaml.Node) (time.Duration, string) {
	if v.Kind != yaml.ScalarNode {
		return 0, "must be a duration (e.g. 60, 60s, 1m, 250ms)"
	}
	if n, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
		if n < 1 || n > int64(limiter.MaxPeriod/time.Second) {
			return 0, fmt.Sprintf("%d seconds is not within 1 s and 10 years", n)
		}
		return time.Duration(n) * time.Second, ""
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		return 0, fmt.Sprintf("%q is not a duration (e.g. 60, 60s, 1m, 250ms)", v.Value)
	}
	if limiter.CheckPeriod(int64(d)) != nil {
		return 0, fmt.Sprintf("%s is not within 1 ns and 10 years", v.Value)
	}
	return d, ""
}

func boolOf(v *yaml.Node) (bool, bool) {
	if v.Kind != yaml.ScalarNode {
		return false, false
	}
	switch v.Value {
	case "true", "True", "TRUE", "yes":
		return true, true
	case "false", "False", "FALSE", "no":
		return false, true
	}
	return false, false
}

func (ps *parser) template(v *yaml.Node, name string) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Value == "" {
		ps.add(v.Line, name, "a key template must be a non-empty string")
		return "", false
	}
	if len(v.Value) > MaxPatternLen {
		ps.add(v.Line, name, "a key template is longer than %d bytes", MaxPatternLen)
		return "", false
	}
	return v.Value, true
}

func (ps *parser) overrides(a Algorithm, base Params, n *yaml.Node, name string) []Override {
	if n.Kind != yaml.SequenceNode {
		ps.add(n.Line, name, "overrides must be a list of {match: glob, parameters...}")
		return nil
	}
	if len(n.Content) > MaxOverrides {
		ps.add(n.Line, name, "%d overrides, more than the %d allowed", len(n.Content), MaxOverrides)
	}
	var out []Override
	for _, e := range n.Content {
		if e.Kind != yaml.MappingNode {
			ps.add(e.Line, name, "an override must be a mapping {match: glob, parameters...}")
			continue
		}
		got := map[string]*yaml.Node{}
		var match *yaml.Node
		bad := ps.dupFields(e, name)
		for i := 0; i+1 < len(e.Content); i += 2 {
			k, v := e.Content[i], e.Content[i+1]
			switch {
			case k.Value == "match":
				match = v
			case paramKeys[k.Value]:
				got[k.Value] = v
			default:
				ps.add(k.Line, name, "unknown field %q in an override", k.Value)
				bad = true
			}
		}
		switch {
		case match == nil:
			ps.add(e.Line, name, "an override has no match (a glob)")
			bad = true
		case match.Kind != yaml.ScalarNode || match.Value == "":
			ps.add(match.Line, name, "an override's match must be a non-empty glob")
			bad = true
		case len(match.Value) > MaxPatternLen:
			ps.add(match.Line, name, "an override's match is longer than %d bytes", MaxPatternLen)
			bad = true
		}
		prm, ok := ps.params(a, got, &base, name, e.Line)
		if bad || !ok {
			continue
		}
		out = append(out, Override{Match: []byte(match.Value), Params: prm, Line: e.Line})
	}
	return out
}

func (ps *parser) members(n *yaml.Node, name string) []rawMember {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		ps.add(n.Line, name, "all must be a non-empty list of {policy: name, key: template}")
		return nil
	}
	var out []rawMember
	for _, e := range n.Content {
		if e.Kind != yaml.MappingNode {
			ps.add(e.Line, name, "a member must be a mapping {policy: name, key: template}")
			continue
		}
		m := rawMember{key: KeyVar, line: e.Line}
		ok := !ps.dupFields(e, name)
		for i := 0; i+1 < len(e.Content); i += 2 {
			k, v := e.Content[i], e.Content[i+1]
			switch k.Value {
			case "policy":
				if v.Kind != yaml.ScalarNode || v.Value == "" {
					ps.add(v.Line, name, "a member's policy must be a name")
					ok = false
				}
				m.policy = v.Value
			case "key":
				s, good := ps.template(v, name)
				ok = ok && good
				m.key = s
			default:
				ps.add(k.Line, name, "unknown field %q in a member", k.Value)
				ok = false
			}
		}
		if m.policy == "" && ok {
			ps.add(e.Line, name, "a member has no policy")
			ok = false
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// resolve links members and companions by name, flattens hierarchies,
// and reports unknown names, cycles and the rest.
func (ps *parser) resolve(raws []*raw, byName map[string]*raw) {
	state := map[*raw]int{} // 0 unvisited, 1 in progress, 2 done
	var flatten func(r *raw, path []string) bool
	flatten = func(r *raw, path []string) bool {
		switch state[r] {
		case 1:
			ps.add(r.line, r.p.Name, "hierarchy cycle: %s", strings.Join(append(path, r.p.Name), " -> "))
			return false
		case 2:
			return !r.bad
		}
		state[r] = 1
		defer func() { state[r] = 2 }()
		good := !r.bad
		for _, m := range r.members {
			mr := byName[m.policy]
			if mr == nil {
				ps.add(m.line, r.p.Name, "unknown member policy %q", m.policy)
				good = false
				continue
			}
			if mr.p.Algorithm == Concurrency {
				ps.add(m.line, r.p.Name, "member %q is a concurrency policy (its lease needs a token and a release: not in a hierarchy)", m.policy)
				good = false
				continue
			}
			if mr.p.Algorithm != Hierarchy {
				if mr.bad {
					good = false
					continue
				}
				r.p.Members = append(r.p.Members, Member{Policy: mr.p, Key: Template(m.key)})
				continue
			}
			if !flatten(mr, append(path, r.p.Name)) {
				good = false
				continue
			}
			for _, inner := range mr.p.Members {
				r.p.Members = append(r.p.Members, Member{Policy: inner.Policy,
					Key: Template(strings.ReplaceAll(string(inner.Key), KeyVar, m.key))})
			}
		}
		if !good {
			r.bad = true
			return false
		}
		if len(r.p.Members) > MaxMembers {
			ps.add(r.line, r.p.Name, "%d members (nested hierarchies flattened), more than the %d allowed", len(r.p.Members), MaxMembers)
			r.bad = true
			return false
		}
		seen := map[Template]bool{}
		for _, m := range r.p.Members {
			if seen[m.Key] {
				ps.add(r.line, r.p.Name, "two members use the key template %q (each member needs its own key)", string(m.Key))
				r.bad = true
				return false
			}
			seen[m.Key] = true
		}
		return true
	}
	for _, r := range raws {
		if r.p.Algorithm == Hierarchy && r.p.Name != "" {
			flatten(r, nil)
		}
	}
	for _, r := range raws {
		if r.companion == "" {
			continue
		}
		c := byName[r.companion]
		switch {
		case c == nil:
			ps.add(r.compLine, r.p.Name, "unknown shadow_companion %q", r.companion)
		case c == r:
			ps.add(r.compLine, r.p.Name, "a policy cannot be its own shadow_companion")
		case c.p.Algorithm == Hierarchy:
			ps.add(r.compLine, r.p.Name, "shadow_companion %q is a hierarchy (a companion must be a single limit)", r.companion)
		case c.p.Algorithm == Concurrency:
			ps.add(r.compLine, r.p.Name, "shadow_companion %q is a concurrency policy (its leases would never be released)", r.companion)
		case c.companion != "":
			ps.add(r.compLine, r.p.Name, "shadow_companion %q has a shadow_companion of its own (companions do not chain)", r.companion)
		default:
			r.p.Companion = c.p
			r.p.CompanionKey = Template(KeyVar + ":shadow:" + c.p.Name)
			if r.hasKey {
				r.p.CompanionKey = Template(r.compKey)
			}
			if r.p.CompanionKey == KeyVar {
				ps.add(r.compLine, r.p.Name, "shadow_companion_key must differ from the policy's own key (\"${key}\"): the companion keeps its own state")
			}
		}
	}
	// Definitions: leaves first, then what refers to them.
	for _, r := range raws {
		if r.p.Algorithm != Hierarchy && r.p.Companion == nil {
			r.p.buildDef()
		}
	}
	for _, r := range raws {
		if r.p.Algorithm == Hierarchy || r.p.Companion != nil {
			r.p.buildDef()
		}
	}
}

// dupFields reports each field of mapping n given more than once (YAML
// would keep the last silently) and returns whether there was one.
func (ps *parser) dupFields(n *yaml.Node, name string) bool {
	seen := map[string]bool{}
	dup := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] {
			ps.add(k.Line, name, "field %q given twice", k.Value)
			dup = true
		}
		seen[k.Value] = true
	}
	return dup
}
