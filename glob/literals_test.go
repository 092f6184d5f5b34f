package glob

import "testing"

func TestLiteralsOf(t *testing.T) {
	for _, c := range []struct {
		glob, prefix, suffix string
		exact                bool
	}{
		{"tenant:big:*", "tenant:big:", "", false},
		{"*:admin", "", ":admin", false},
		{"a*b?c", "a", "c", false},
		{"user:42", "user:42", "", true},
		{`a\*b`, "a*b", "", true},    // an escaped '*' is a literal
		{`ab\`, `ab\`, "", true},     // a trailing '\' is itself
		{"a[bc]d", "a", "d", false},  // a class is one wildcard byte
		{"a[b-]d", "a", "", false},   // b-] is a range: the class runs to the end
		{`a[\]x]y`, "a", "y", false}, // '\' escapes ']' in a class
		{"a[x-]]y", "a", "y", false}, // x-] is a range: the class ends at the next ']'
		{"a[bcd", "a", "", false},    // unterminated: the class runs to the end
		{"[^a]", "", "", false},      // negated class
		{"**", "", "", false},
	} {
		l := LiteralsOf([]byte(c.glob))
		if l.Prefix != c.prefix || l.Suffix != c.suffix || l.Exact != c.exact {
			t.Errorf("LiteralsOf(%q) = prefix %q suffix %q exact %v, want %q %q %v",
				c.glob, l.Prefix, l.Suffix, l.Exact, c.prefix, c.suffix, c.exact)
		}
	}
}
