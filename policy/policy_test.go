package policy

import (
	"errors"
	"os"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"
)

const good = `
policies:
  - name: api
    algorithm: gcra
    burst: 15
    count: 30
    period: 1m
    overrides:
      - match: "tenant:big:*"
        count: 300
      - match: "tenant:*"
        burst: 1
  - name: login
    algorithm: fixed
    limit: 5
    period: 60
  - name: log
    algorithm: sliding_log
    limit: 3
    period: 250ms
  - name: jobs
    algorithm: concurrency
    limit: 10
    lease: 30s
  - name: global
    algorithm: sliding
    limit: 10000
    period: 1s
  - name: checkout
    all:
      - policy: global
        key: "global:checkout"
      - policy: inner
        key: "user:${key}"
  - name: inner
    all:
      - policy: api
      - policy: login
        key: "${key}:login"
  - name: next
    algorithm: gcra
    count: 20
    period: 1m
    shadow: true
  - name: live
    algorithm: gcra
    count: 30
    period: 1m
    shadow_companion: next
`

// stubGlob is a stand-in for the server's Redis glob in these tests.
func stubGlob(pattern, key []byte) bool {
	ok, _ := path.Match(string(pattern), string(key))
	return ok
}

func TestParseGood(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if have, want := s.Len(), 9; have != want {
		t.Fatalf("policies: have %d, want %d", have, want)
	}
	api := s.Lookup([]byte("api"))
	if api.Algorithm != GCRA || api.Params != (Params{Burst: 15, Count: 30, Period: time.Minute}) {
		t.Errorf("api: %+v", api)
	}
	for _, c := range []struct {
		key  string
		want Params
	}{
		{"tenant:big:1", Params{Burst: 15, Count: 300, Period: time.Minute}},
		{"tenant:small", Params{Burst: 1, Count: 30, Period: time.Minute}},
		{"other", Params{Burst: 15, Count: 30, Period: time.Minute}},
	} {
		if have := api.ParamsFor([]byte(c.key), stubGlob); have != c.want {
			t.Errorf("ParamsFor(%q) = %+v, want %+v", c.key, have, c.want)
		}
	}
	if p := s.Lookup([]byte("log")).Params; p.Period != 250*time.Millisecond || p.Limit != 3 {
		t.Errorf("log: %+v", p)
	}
	if p := s.Lookup([]byte("login")).Params; p.Period != time.Minute {
		t.Errorf("login: an integer period is seconds: %+v", p)
	}
	co := s.Lookup([]byte("checkout"))
	var got []string
	for _, m := range co.Members {
		got = append(got, m.Policy.Name+"@"+string(m.Key.Expand(nil, []byte("u1"))))
	}
	if have, want := strings.Join(got, " "), "global@global:checkout api@user:u1 login@user:u1:login"; have != want {
		t.Errorf("checkout flattened: have %q, want %q", have, want)
	}
	live := s.Lookup([]byte("live"))
	if live.Companion == nil || live.Companion.Name != "next" || string(live.CompanionKey.Expand(nil, []byte("k"))) != "k:shadow:next" {
		t.Errorf("live companion: %+v", live)
	}
	if !s.Lookup([]byte("next")).Shadow {
		t.Error("next: not shadow")
	}
	var names []string
	for _, p := range s.Policies() {
		names = append(names, p.Name)
	}
	if have, want := strings.Join(names, ","), "api,checkout,global,inner,jobs,live,log,login,next"; have != want {
		t.Errorf("order: %s", have)
	}
}

// TestParseEveryProblem: one file with many problems gets one error that
// lists each, with its line and policy, in line order.
func TestParseEveryProblem(t *testing.T) {
	src := `policies:
  - name: a
    algorithm: gcra
    count: 0
    period: 1m
  - name: b
    algorithm: fixed
    limit: 5
  - name: c
    algorithm: quantum
  - name: d
    algorithm: sliding
    limit: 5
    period: forever
    burst: 3
  - name: a
    algorithm: fixed
    limit: 1
    period: 1s
  - name: h
    all:
      - policy: nope
  - name: cyc1
    all:
      - policy: cyc2
  - name: cyc2
    all:
      - policy: cyc1
  - name: e
    algorithm: gcra
    count: 1
    period: 1s
    shadow_companion: h
    colour: blue
  - name: f
    algorithm: fixed
    limit: 2
    period: 1s
    overrides:
      - match: "x*"
      - count: 3
  - name: "bad name!"
    algorithm: fixed
    limit: 1
    period: 1s
`
	_, err := Parse([]byte(src))
	var pe *Error
	if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want *Error", err)
	}
	want := []string{
		`line 4: policy "a": count must be a positive integer`,
		`line 6: policy "b": period is required for algorithm fixed`,
		`line 10: policy "c": unknown algorithm "quantum"`,
		`line 14: policy "d": period: "forever" is not a duration`,
		`line 15: policy "d": burst does not apply to algorithm sliding`,
		`line 16: policy "a": the name is already used by the policy at line 2`,
		`line 22: policy "h": unknown member policy "nope"`,
		`hierarchy cycle: cyc1 -> cyc2 -> cyc1`,
		`policy "e": shadow_companion "h" is a hierarchy`,
		`line 34: policy "e": unknown field "colour"`,
		`line 40: policy "f": an override must set at least one parameter`,
		`line 41: policy "f": an override has no match`,
		`line 41: policy "f": count does not apply to algorithm fixed`,
		`invalid policy name "bad name!"`,
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
	for i := 1; i < len(pe.Problems); i++ {
		if pe.Problems[i].Line < pe.Problems[i-1].Line {
			t.Errorf("problems not in line order: %v", pe.Problems)
		}
	}
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("the error is not one line: %q", msg)
	}
	t.Logf("%d problems reported at once", len(pe.Problems))
}

func TestParseLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString("policies:\n")
	for i := 0; i <= MaxPolicies; i++ {
		b.WriteString("  - {name: p" + itoa(i) + ", algorithm: fixed, limit: 1, period: 1s}\n")
	}
	if _, err := Parse([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "more than the 1000 allowed") {
		t.Errorf("too many policies: %v", err)
	}
	b.Reset()
	b.WriteString("policies:\n  - name: big\n    all:\n")
	for i := 0; i <= MaxMembers; i++ {
		b.WriteString("      - {policy: leaf, key: \"k" + itoa(i) + ":${key}\"}\n")
	}
	b.WriteString("  - {name: leaf, algorithm: fixed, limit: 1, period: 1s}\n")
	if _, err := Parse([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "17 members") {
		t.Errorf("too many members: %v", err)
	}
	for _, c := range []struct{ src, want string }{
		{"policies:\n  - {name: a, all: [{policy: l}, {policy: l}]}\n  - {name: l, algorithm: fixed, limit: 1, period: 1s}\n", "two members use the key template"},
		{"policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 1s, shadow_companion: a}\n", "its own shadow_companion"},
		{"policies:\n  - {name: a, algorithm: gcra, count: 2000000000, period: 1s}\n", "zero rate"},
		{"policies:\n  - {name: a, algorithm: sliding, limit: 5000000000, period: 1s}\n", "at most 4294967295"},
		{"policies:\n  - {name: a, algorithm: concurrency, limit: 10001, lease: 1s}\n", "at most 10000"},
		{"policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 11y}\n", "not a duration"},
		{"policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 0}\n", "not within"},
		{"policies:\n  - {name: a, all: [{policy: c}]}\n  - {name: c, algorithm: concurrency, limit: 1, lease: 1s}\n", "is a concurrency policy"},
		{"policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 1s, shadow_companion: c}\n  - {name: c, algorithm: concurrency, limit: 1, lease: 1s}\n", "is a concurrency policy"},
		{"policies:\n  - name: a\n    algorithm: fixed\n    limit: 1\n    period: 1s\n    limit: 2\n", `line 6: policy "a": field "limit" given twice`},
		{"policies: [\n", "not valid YAML"},
		{"other: 1\n", "unknown key \"other\""},
		{"policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 1s, shadow_companion: b}\n  - {name: b, algorithm: fixed, limit: 1, period: 1s, shadow_companion: a}\n", "companions do not chain"},
	} {
		if _, err := Parse([]byte(c.src)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.src, err, c.want)
		}
	}
	if s, err := Parse(nil); err != nil || s.Len() != 0 {
		t.Errorf("empty file: %v, %d", err, s.Len())
	}
	// The size limits, each at its bound (accepted) and one past it.
	overrides := func(n int) string {
		src := "policies:\n  - name: a\n    algorithm: fixed\n    limit: 1\n    period: 1s\n    overrides:\n"
		for i := range n {
			src += "      - {match: 'k" + itoa(i) + ":*', limit: 2}\n"
		}
		return src
	}
	glob := func(n int) string {
		return "policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 1s, overrides: [{match: '" + strings.Repeat("x", n) + "', limit: 2}]}\n"
	}
	tmpl := func(n int) string {
		return "policies:\n  - {name: a, all: [{policy: l, key: '" + strings.Repeat("x", n) + "'}]}\n  - {name: l, algorithm: fixed, limit: 1, period: 1s}\n"
	}
	name := func(n int) string {
		return "policies:\n  - {name: " + strings.Repeat("n", n) + ", algorithm: fixed, limit: 1, period: 1s}\n"
	}
	file := func(n int) string { // a valid file of n bytes: a comment pads it
		head := "policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 1s}\n#"
		return head + strings.Repeat("x", n-len(head))
	}
	for _, c := range []struct {
		what      string
		at, past  string
		wantError string
	}{
		{"overrides", overrides(MaxOverrides), overrides(MaxOverrides + 1), "101 overrides, more than the 100 allowed"},
		{"glob", glob(MaxPatternLen), glob(MaxPatternLen + 1), "match is longer than 512 bytes"},
		{"key template", tmpl(MaxPatternLen), tmpl(MaxPatternLen + 1), "key template is longer than 512 bytes"},
		{"name", name(MaxNameLen), name(MaxNameLen + 1), "1 to 64 letters"},
		{"file", file(MaxFileBytes), file(MaxFileBytes + 1), "the file has 4194305 bytes, more than the 4194304 allowed"},
	} {
		if _, err := Parse([]byte(c.at)); err != nil {
			t.Errorf("%s at the limit: %v", c.what, err)
		}
		if _, err := Parse([]byte(c.past)); err == nil || !strings.Contains(err.Error(), c.wantError) {
			t.Errorf("%s past the limit: err = %v, want %q", c.what, err, c.wantError)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestDiffAndAdopt(t *testing.T) {
	old, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	old.Lookup([]byte("login")).Counts.Allowed.Add(7)
	src := strings.Replace(good, "limit: 10000", "limit: 20000", 1) // global, hence checkout
	src = strings.Replace(src, "  - name: jobs\n", "  - name: jobs2\n", 1)
	s, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c := Diff(old, s)
	if have, want := strings.Join(c.Added, ","), "jobs2"; have != want {
		t.Errorf("added %q, want %q", have, want)
	}
	if have, want := strings.Join(c.Removed, ","), "jobs"; have != want {
		t.Errorf("removed %q, want %q", have, want)
	}
	if have, want := strings.Join(c.Changed, ","), "checkout,global"; have != want {
		t.Errorf("changed %q, want %q", have, want)
	}
	s.Adopt(old)
	if n := s.Lookup([]byte("login")).Counts.Allowed.Load(); n != 7 {
		t.Errorf("login's counts after Adopt: %d, want 7", n)
	}
}

func TestGCRAParams(t *testing.T) {
	if g := GCRAParams(Params{Burst: 1, Count: 2, Period: time.Minute}, 1); g.Period != 60 || g.PeriodNS != 0 {
		t.Errorf("whole seconds: %+v", g)
	}
	if g := GCRAParams(Params{Burst: 1, Count: 2, Period: 1500 * time.Millisecond}, 1); g.Period != 0 || g.PeriodNS != 15e8 {
		t.Errorf("ms: %+v", g)
	}
}

// TestReadmeExample: the policy file of docs/policies.md parses, and the
// README tour's and the package doc's too.
func TestReadmeExample(t *testing.T) {
	set, err := Parse(firstYAML(t, "../docs/policies.md", "# Policies\n"))
	if err != nil {
		t.Fatalf("docs/policies.md example: %v", err)
	}
	if set.Len() != 7 || set.Lookup([]byte("checkout")) == nil || set.Lookup([]byte("api-live")).Companion == nil {
		t.Errorf("docs/policies.md example: %d policies", set.Len())
	}
	set, err = Parse(firstYAML(t, "../README.md", "\n### Name the limits in a policy file\n"))
	if err != nil {
		t.Fatalf("README tour example: %v", err)
	}
	if api := set.Lookup([]byte("api")); set.Len() != 2 || api == nil || len(api.Overrides) != 1 || set.Lookup([]byte("login")) == nil {
		t.Errorf("README tour example: %d policies", set.Len())
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	in := false
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "//\tpolicies:") {
			in = true
		}
		if in && !strings.HasPrefix(l, "//\t") {
			break
		}
		if in {
			b.WriteString(strings.TrimPrefix(l, "//\t") + "\n")
		}
	}
	if set, err := Parse([]byte(b.String())); err != nil || set.Len() != 6 {
		t.Errorf("doc.go example: %v (%d policies)", err, set.Len())
	}
}

// firstYAML returns the first yaml block after heading in the markdown
// file at path.
func firstYAML(t *testing.T, path, heading string) []byte {
	t.Helper()
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	i := strings.Index(s, heading)
	if i < 0 {
		t.Fatalf("%s has no heading %q", path, strings.TrimSpace(heading))
	}
	s = s[i:]
	start := strings.Index(s, "```yaml\n")
	if start < 0 {
		t.Fatalf("no yaml block after %q in %s", strings.TrimSpace(heading), path)
	}
	end := strings.Index(s[start+8:], "```")
	if end < 0 {
		t.Fatalf("unterminated yaml block after %q in %s", strings.TrimSpace(heading), path)
	}
	return []byte(s[start+8 : start+8+end])
}
