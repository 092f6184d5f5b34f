package policy

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; it returns a Set or an *Error with at
// least one problem, on one line (unless the file's own text brings a
// line break into it); a Set respects the limits, its hierarchies hold
// only single limits that are not concurrency policies, and every single
// limit has a period (and a limit, but for gcra).
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("policies:\n  - {name: a, all: [{policy: a}]}\n"))
	f.Add([]byte("policies:\n  - {name: a, algorithm: gcra, count: 1, period: 1s, overrides: [{match: 'x*', burst: 3}]}\n"))
	f.Add([]byte("policies:\n  - {name: a, all: [{policy: b, key: 'g'}, {policy: b}]}\n  - {name: b, all: [{policy: c, key: '{${key}}:x'}]}\n  - {name: c, algorithm: fixed, limit: 1, period: 1}\n"))
	f.Add([]byte("policies: [1, {}, {name: ''}, {name: a, algorithm: [x]}]\n"))
	f.Add([]byte("&a [*a, *a]"))
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := Parse(src)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("error %v is not an *Error with problems", err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") && !strings.ContainsAny(string(src), "\r\n\x85") {
				t.Fatalf("error on several lines: %q", err)
			}
			return
		}
		if s.Len() > MaxPolicies {
			t.Fatalf("%d policies", s.Len())
		}
		for _, p := range s.Policies() {
			if p.Counts == nil || p.String() == "" || !validName(p.Name) {
				t.Fatalf("policy %+v", p)
			}
			if len(p.Members) > MaxMembers || len(p.Overrides) > MaxOverrides {
				t.Fatalf("policy %s past the limits", p.Name)
			}
			for _, m := range p.Members {
				if m.Policy.Algorithm == Hierarchy || m.Policy.Algorithm == Concurrency {
					t.Fatalf("policy %s: member %s is a %s", p.Name, m.Policy.Name, m.Policy.Algorithm)
				}
			}
			if p.Algorithm != Hierarchy && (p.Params.Period <= 0 || p.Algorithm != GCRA && p.Params.Limit < 1) {
				t.Fatalf("policy %s: params %+v", p.Name, p.Params)
			}
		}
	})
}
