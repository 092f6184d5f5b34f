package commands

import (
	"testing"
	"time"
)

// bytesToHuman formats as Redis's bytesToHuman (used_memory_human).
func TestBytesToHuman(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0B"}, {1023, "1023B"}, {1024, "1.00K"}, {941040, "918.98K"}, {12234752, "11.67M"},
		{25276510208, "23.54G"}, {1 << 40, "1.00T"}, {1 << 50, "1.00P"}, {1 << 60, "1.00E"},
	} {
		if got := bytesToHuman(c.n); got != c.want {
			t.Errorf("bytesToHuman(%d) = %s, want %s", c.n, got, c.want)
		}
	}
}

// instMetric averages per-second rates over its last 16 samples, as
// Redis's instantaneous_ops_per_sec does.
func TestInstMetric(t *testing.T) {
	var m instMetric
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	m.add(ms(100), 0)
	if r := m.rate(); r != 0 {
		t.Fatalf("one sample: rate %v, want 0", r)
	}
	for i := 1; i <= instSamples; i++ {
		m.add(ms(100+100*i), int64(50*i)) // 50 per 100 ms: 500/s
	}
	if r := m.rate(); r != 500 {
		t.Errorf("steady 500/s: rate %v", r)
	}
	for i := 1; i <= instSamples; i++ {
		m.add(ms(100+100*(instSamples+i)), int64(50*instSamples)) // idle
	}
	if r := m.rate(); r != 0 {
		t.Errorf("idle for 16 samples: rate %v, want 0", r)
	}
}

// splitPending shows pending reply bytes as Redis's 16 KiB reply buffer
// and list of 16 KiB blocks would hold them.
func TestSplitPending(t *testing.T) {
	for _, c := range []struct{ n, obl, oll, omem int }{
		{0, 0, 0, 0}, {21, 21, 0, 0}, {16384, 16384, 0, 0}, {16385, 16384, 1, 1}, {16384 * 3, 16384, 2, 32768}, {16384*3 + 1, 16384, 3, 32769},
	} {
		if obl, oll, omem := splitPending(c.n); obl != c.obl || oll != c.oll || omem != c.omem {
			t.Errorf("splitPending(%d) = %d %d %d, want %d %d %d", c.n, obl, oll, omem, c.obl, c.oll, c.omem)
		}
	}
}
