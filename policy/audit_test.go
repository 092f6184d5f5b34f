package policy

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestAuditFields: the audit fields' defaults (off, audit:<name>, 100000,
// 1) and values as given; a hierarchy and a shadow policy may audit too.
func TestAuditFields(t *testing.T) {
	s, err := Parse([]byte(`policies:
  - {name: plain, algorithm: fixed, limit: 1, period: 1s}
  - {name: lim, algorithm: fixed, limit: 1, period: 1s, audit: limited}
  - name: all
    algorithm: gcra
    count: 1
    period: 1s
    shadow: true
    audit: all
    audit_stream: "audit-log{api}"
    audit_maxlen: 5000
    audit_sample: 0.01
  - {name: h, all: [{policy: plain}], audit: all}
  - {name: off2, algorithm: fixed, limit: 1, period: 1s, audit: off, audit_sample: 0.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		mode   AuditMode
		stream string
		maxlen int64
		sample float64
	}{
		{"plain", AuditOff, "audit:plain", DefaultAuditMaxLen, 1},
		{"lim", AuditLimited, "audit:lim", DefaultAuditMaxLen, 1},
		{"all", AuditAll, "audit-log{api}", 5000, 0.01},
		{"h", AuditAll, "audit:h", DefaultAuditMaxLen, 1},
		{"off2", AuditOff, "audit:off2", DefaultAuditMaxLen, 0.5},
	} {
		p := s.Lookup([]byte(c.name))
		if p.Audit != c.mode || p.AuditStream != c.stream || p.AuditMaxLen != c.maxlen || p.AuditSample != c.sample {
			t.Errorf("%s: audit %s %q %d %g, want %s %q %d %g", c.name, p.Audit, p.AuditStream, p.AuditMaxLen, p.AuditSample,
				c.mode, c.stream, c.maxlen, c.sample)
		}
		if key := p.AuditKey(); (key == nil) != (c.mode == AuditOff) || key != nil && string(key) != c.stream {
			t.Errorf("%s: AuditKey %q", c.name, key)
		}
	}
	if !AuditLimited.Audits(true) || AuditLimited.Audits(false) || !AuditAll.Audits(false) || AuditOff.Audits(true) {
		t.Error("Audits")
	}
}

// TestAuditKeep: AuditKeep keeps a draw r when r < sample * 2^64; with
// sample 1 every draw, and no draw is asked for.
func TestAuditKeep(t *testing.T) {
	for _, c := range []struct {
		sample   float64
		keep, no uint64 // a draw kept, a draw refused
	}{
		{0.5, 1<<63 - 1, 1 << 63},
		{0.25, 1<<62 - 1, 1 << 62},
		{1e-30, 0, 1},
	} {
		p := &Policy{AuditSample: c.sample}
		p.setAuditCut()
		if !p.AuditSampled() || !p.AuditKeep(c.keep) || p.AuditKeep(c.no) {
			t.Errorf("sample %g: keep(%d)=%v keep(%d)=%v", c.sample, c.keep, p.AuditKeep(c.keep), c.no, p.AuditKeep(c.no))
		}
	}
	p := &Policy{AuditSample: 1}
	p.setAuditCut()
	if p.AuditSampled() || !p.AuditKeep(^uint64(0)) {
		t.Error("sample 1 must keep every draw without one")
	}
}

// TestAuditProblems: every bad audit field is reported, with its line.
func TestAuditProblems(t *testing.T) {
	_, err := Parse([]byte(`policies:
  - name: a
    algorithm: fixed
    limit: 1
    period: 1s
    audit: sometimes
    audit_stream: ""
    audit_maxlen: 0
    audit_sample: 0
  - name: b
    algorithm: fixed
    limit: 1
    period: 1s
    audit: true
    audit_stream: "audit:${key}"
    audit_maxlen: 1000000001
    audit_sample: 1.5
  - {name: c, algorithm: fixed, limit: 1, period: 1s, audit_sample: NaN, audit_maxlen: 10x, audit: [all]}
`))
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *Error", err)
	}
	want := []string{
		`line 6: policy "a": audit must be off, limited or all, not "sometimes"`,
		`line 7: policy "a": audit_stream must name a key`,
		`line 8: policy "a": audit_maxlen must be an integer within 1 and 1000000000, not "0"`,
		`line 9: policy "a": audit_sample must be a number within 0 (excluded) and 1, not "0"`,
		`line 14: policy "b": audit must be off, limited or all, not "true"`,
		`line 15: policy "b": audit_stream is one key for the whole policy: it takes no "${key}"`,
		`line 16: policy "b": audit_maxlen must be an integer within 1 and 1000000000, not "1000000001"`,
		`line 17: policy "b": audit_sample must be a number within 0 (excluded) and 1, not "1.5"`,
		`line 18: policy "c": audit_sample must be a number within 0 (excluded) and 1, not "NaN"`,
		`line 18: policy "c": audit_maxlen must be an integer within 1 and 1000000000, not "10x"`,
		`line 18: policy "c": audit must be a scalar`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("missing %q", w)
		}
	}
	if len(pe.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(pe.Problems), len(want), strings.ReplaceAll(msg, "; ", "\n"))
	}
	long := "policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 1s, audit: all, audit_stream: " + strings.Repeat("s", MaxPatternLen+1) + "}\n"
	if _, err := Parse([]byte(long)); err == nil || !strings.Contains(err.Error(), "audit_stream is longer than 512 bytes") {
		t.Errorf("long audit_stream: %v", err)
	}
}

// TestAuditDiff: changing a policy's audit is a change (Diff), so a
// reload logs it.
func TestAuditDiff(t *testing.T) {
	a, _ := Parse([]byte("policies:\n  - {name: p, algorithm: fixed, limit: 1, period: 1s}\n"))
	for _, src := range []string{
		"policies:\n  - {name: p, algorithm: fixed, limit: 1, period: 1s, audit: limited}\n",
		"policies:\n  - {name: p, algorithm: fixed, limit: 1, period: 1s, audit: limited, audit_sample: 0.5}\n",
	} {
		b, err := Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if ch := Diff(a, b); len(ch.Changed) != 1 {
			t.Errorf("%s: %+v, want p changed", src, ch)
		}
		a = b
	}
}

// TestNewAudit: the audit of something outside the policy file (an Envoy
// rule): nil when off, the defaults, and the policy file's problems.
func TestNewAudit(t *testing.T) {
	node := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }
	if a, probs := NewAudit("d.k", map[string]*yaml.Node{"audit_maxlen": node("10")}); a != nil || probs != nil {
		t.Fatalf("audit off: %v %v", a, probs)
	}
	a, probs := NewAudit("d.k", map[string]*yaml.Node{"audit": node("all"), "audit_sample": node("0.5")})
	if probs != nil || a.Audit != AuditAll || a.AuditStream != "audit:d.k" || a.AuditMaxLen != DefaultAuditMaxLen ||
		string(a.AuditKey()) != "audit:d.k" || !a.AuditSampled() || a.Counts != nil {
		t.Fatalf("%+v %v", a, probs)
	}
	if a, probs := NewAudit("d.k", map[string]*yaml.Node{"audit": node("all"), "audit_maxlen": node("-1")}); a != nil ||
		len(probs) != 1 || probs[0] != `audit_maxlen must be an integer within 1 and 1000000000, not "-1"` {
		t.Fatalf("%v %q", a, probs)
	}
}
