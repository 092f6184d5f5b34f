package stream

import "testing"

// TestRaxNodes: XINFO STREAM's radix-tree-nodes as the real Redis 7.0.15
// answered for streams of n entries "<i>-0" with a one-byte field and
// value, and after trimming and deleting.
func TestRaxNodes(t *testing.T) {
	build := func(n int) *Stream {
		s := New()
		for i := 1; i <= n; i++ {
			s.Append(ID{uint64(i), 0}, [][]byte{[]byte("f"), []byte("v")})
		}
		return s
	}
	if got := New().RaxNodes(); got != 1 {
		t.Fatalf("empty: %d", got)
	}
	for _, c := range []struct {
		n    int
		want int64
	}{{1, 2}, {150, 6}, {250, 8}, {1000, 26}, {5000, 121}} {
		if got := build(c.n).RaxNodes(); got != c.want {
			t.Errorf("%d entries: %d rax nodes, Redis has %d", c.n, got, c.want)
		}
	}
	s := build(1000)
	s.Trim(TrimArgs{MaxLen: 500})
	if got := s.RaxNodes(); got != 14 {
		t.Errorf("after XTRIM MAXLEN 500: %d, Redis has 14", got)
	}
	for i := 601; i <= 700; i++ {
		s.Delete(ID{uint64(i), 0})
	}
	if got, nodes := s.RaxNodes(), s.Nodes(); got != 11 || nodes != 4 {
		t.Errorf("after XDEL 601..700: %d nodes, %d rax nodes; Redis has 4 and 11", nodes, got)
	}
}
