package hostile

import "testing"

// TestNextRESP: the framing the fuzz targets use finds the end of RESP2
// and RESP3 values, waits for incomplete ones and rejects malformed ones.
func TestNextRESP(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // -2: the whole input
	}{
		{"+OK\r\n", -2},
		{":12\r\n", -2},
		{"$-1\r\n", -2},
		{"*-1\r\n", -2},
		{"$3\r\nabc\r\n", -2},
		{"*2\r\n:1\r\n$1\r\nx\r\n", -2},
		{"_\r\n", -2},
		{",3.5\r\n", -2},
		{"#t\r\n", -2},
		{"=8\r\ntxt:abcd\r\n", -2},
		{"%1\r\n$1\r\nk\r\n*1\r\n%1\r\n+a\r\n:1\r\n", -2},
		{"~2\r\n+a\r\n+b\r\n", -2},
		{">2\r\n$10\r\ninvalidate\r\n_\r\n", -2},
		{"|1\r\n+key\r\n+val\r\n:5\r\n", -2},
		{"+OK\r\n+NEXT\r\n", 5},
		{"%2\r\n+a\r\n:1\r\n+b\r\n", 0},
		{"$3\r\nab", 0},
		{"+OK", 0},
		{":x\r\n", -1},
		{"#x\r\n", -1},
		{"_x\r\n", -1},
		{"$3\r\nabcd\r\n", -1},
		{"?\r\n", -1},
		{"+OK\n", -1},
	} {
		want := tc.want
		if want == -2 {
			want = len(tc.in)
		}
		if got := nextRESP([]byte(tc.in)); got != want {
			t.Errorf("nextRESP(%q) = %d, want %d", tc.in, got, want)
		}
	}
}
