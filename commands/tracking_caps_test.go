package commands_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// TestTrackingPrefixCaps: BCAST prefixes are capped per connection
// (10000), on the server (100000, every connection's) and in length (1024
// bytes), with the caps shown by CONFIG GET; a CLIENT TRACKING command
// that would pass one is refused whole with its error and registers
// nothing (INFO tracking_total_prefixes and tracking_clients unchanged,
// the client not tracking), while commands up to the caps are served, and
// a client that leaves makes room again.
func TestTrackingPrefixCaps(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	a := resptest.MustDial(t, addr)
	// The documented defaults; CONFIG GET must show them.
	const perClient, total, maxLen = 10000, 100000, 1024
	for name, want := range map[string]int{
		"tracking-max-prefixes-per-client": perClient,
		"tracking-max-prefixes":            total,
		"tracking-max-prefix-len":          maxLen,
	} {
		v := a.MustDo(t, "CONFIG", "GET", name)
		if len(v.Elems) != 2 || v.Elems[1].Str != strconv.Itoa(want) {
			t.Errorf("CONFIG GET %s: %v, want %d", name, v, want)
		}
	}
	errClient := "ERR too many tracking prefixes: at most " + strconv.Itoa(perClient) + " per client"
	errServer := "ERR too many tracking prefixes: at most " + strconv.Itoa(total) + " on the server"
	errLen := "ERR tracking prefix too long: at most " + strconv.Itoa(maxLen) + " bytes"

	track := func(c *resptest.Conn, prefixes ...string) string {
		t.Helper()
		args := []string{"CLIENT", "TRACKING", "on", "BCAST"}
		for _, p := range prefixes {
			args = append(args, "PREFIX", p)
		}
		v := c.MustDo(t, args...)
		if v.Kind == '-' {
			return v.Str
		}
		return string(v.Encode(nil))
	}
	// n distinct prefixes, none overlapping another (tag + 6 digits + ':').
	gen := func(tag string, n int) []string {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = fmt.Sprintf("%s%06d:", tag, i)
		}
		return ps
	}
	info := func(field string) string {
		t.Helper()
		for _, l := range splitLines(a.MustDo(t, "INFO").Str) {
			if v, ok := strings.CutPrefix(l, field+":"); ok {
				return v
			}
		}
		t.Fatalf("INFO lacks %s", field)
		return ""
	}
	wantState := func(step string, prefixes, clients int) {
		t.Helper()
		if got := info("tracking_total_prefixes"); got != strconv.Itoa(prefixes) {
			t.Errorf("%s: tracking_total_prefixes:%s, want %d", step, got, prefixes)
		}
		if got := info("tracking_clients"); got != strconv.Itoa(clients) {
			t.Errorf("%s: tracking_clients:%s, want %d", step, got, clients)
		}
	}
	notTracking := func(step string, c *resptest.Conn) {
		t.Helper()
		if v := c.MustDo(t, "CLIENT", "TRACKINGINFO"); len(v.Elems) < 2 || len(v.Elems[1].Elems) == 0 || v.Elems[1].Elems[0].Str != "off" {
			t.Errorf("%s: TRACKINGINFO %v, want tracking off", step, v)
		}
	}

	// One connection: one prefix more than the cap in one command, then
	// the cap, then one more in a second command.
	if got := track(a, gen("a", perClient+1)...); got != errClient {
		t.Errorf("%d prefixes in one command: %q, want %q", perClient+1, got, errClient)
	}
	notTracking("refused first command", a)
	wantState("refused first command", 0, 0)
	if got := track(a, gen("a", perClient)...); got != "+OK\r\n" {
		t.Fatalf("%d prefixes: %q", perClient, got)
	}
	if got := track(a, "zz"); got != errClient {
		t.Errorf("prefix %d of the client: %q, want %q", perClient+1, got, errClient)
	}
	if got := track(a); got != errClient {
		t.Errorf("BCAST without PREFIX past the cap: %q, want %q", got, errClient)
	}
	wantState("client at its cap", perClient, 1)

	// Length: one byte over, refused; the cap itself, served.
	b := resptest.MustDial(t, addr)
	if got := track(b, strings.Repeat("x", maxLen+1)); got != errLen {
		t.Errorf("a %d-byte prefix: %q, want %q", maxLen+1, got, errLen)
	}
	notTracking("refused long prefix", b)
	wantState("refused long prefix", perClient, 1)
	if got := track(b, "y", strings.Repeat("x", maxLen)); got != "+OK\r\n" {
		t.Errorf("a %d-byte prefix: %q", maxLen, got)
	}
	b.MustDo(t, "CLIENT", "TRACKING", "off")
	wantState("after OFF", perClient, 1)

	// The server: more connections up to the total, then one prefix more.
	for i := 1; i < total/perClient; i++ {
		c := resptest.MustDial(t, addr)
		if got := track(c, gen(fmt.Sprintf("c%d-", i), perClient)...); got != "+OK\r\n" {
			t.Fatalf("client %d: %q", i, got)
		}
	}
	wantState("server at its cap", total, total/perClient)
	k := resptest.MustDial(t, addr)
	if got := track(k, "k"); got != errServer {
		t.Errorf("prefix %d of the server: %q, want %q", total+1, got, errServer)
	}
	notTracking("refused past the server's cap", k)
	wantState("refused past the server's cap", total, total/perClient)
	// A client that turns tracking off makes room.
	a.MustDo(t, "CLIENT", "TRACKING", "off")
	if got := track(k, "k"); got != "+OK\r\n" {
		t.Errorf("after a client left: %q", got)
	}
	wantState("after a client left", total-perClient+1, total/perClient)
}
