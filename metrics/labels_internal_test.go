package metrics

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cellserver/cellserver/commands"
)

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", MaxPrefixLabelLen-1) + "é" // é is 2 bytes: cut in half
	for _, tc := range []struct{ in, want string }{
		{"user", "user"},
		{"", ""},
		{"\xff", "\uFFFD"},
		{"a\xffb\xfe", "a\uFFFDb\uFFFD"},
		{strings.Repeat("x", 1000), strings.Repeat("x", MaxPrefixLabelLen)},
		{long, strings.Repeat("a", MaxPrefixLabelLen-1)},
	} {
		got := labelValue(tc.in)
		if got != tc.want {
			t.Errorf("labelValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !utf8.ValidString(got) || len(got) > MaxPrefixLabelLen+2 {
			t.Errorf("labelValue(%q) = %q: invalid or too long", tc.in, got)
		}
	}
}

func TestPrefixLabelsMerge(t *testing.T) {
	got := prefixLabels([]commands.PrefixCount{
		{Prefix: "user", Count: 5}, {Prefix: "\xff", Count: 3}, {Prefix: "\xfe", Count: 2},
		{Prefix: strings.Repeat("k", 200), Count: 1}, {Prefix: strings.Repeat("k", 300), Count: 1},
	})
	want := []commands.PrefixCount{
		{Prefix: "user", Count: 5}, {Prefix: "\uFFFD", Count: 5}, {Prefix: strings.Repeat("k", MaxPrefixLabelLen), Count: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("prefixLabels = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("prefixLabels[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
