package commands_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// increxModel is the integer INCREX of Redis 8.8's documentation, written
// plainly with unbounded integers: one key's value and expiry (ms; 0:
// none), absent when !exists.
type increxModel struct {
	exists bool
	val    int64
	exp    int64
}

// increxCall is one generated INCREX.
type increxCall struct {
	incr           *int64 // nil: the default, 1
	lb, ub         *int64
	saturate       bool
	unit           string // "", "EX", "PX", "EXAT", "PXAT", "PERSIST"
	amount         int64  // the expiry argument (EX seconds, PX ms, ...)
	enx            bool
	args           []string
	wantN, wantD   int64
	wantErr        string
	applied        bool
	newVal, newExp int64
}

// apply runs c on the model at now (ms) and fills c's expectations.
func (m *increxModel) apply(c *increxCall, now int64) {
	if m.exists && m.exp != 0 && now > m.exp {
		*m = increxModel{}
	}
	incr := int64(1)
	if c.incr != nil {
		incr = *c.incr
	}
	lo, hi := big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)
	if c.lb != nil {
		lo = big.NewInt(*c.lb)
	}
	if c.ub != nil {
		hi = big.NewInt(*c.ub)
	}
	if lo.Cmp(hi) > 0 {
		c.wantErr = "ERR LBOUND must be less than or equal to UBOUND"
		return
	}
	cur := m.val
	r := new(big.Int).Add(big.NewInt(cur), big.NewInt(incr))
	skip := false
	switch {
	case r.Cmp(hi) > 0:
		skip, r = !c.saturate, hi
	case r.Cmp(lo) < 0:
		skip, r = !c.saturate, lo
	}
	d := new(big.Int).Sub(r, big.NewInt(cur))
	if skip || !d.IsInt64() {
		c.wantN, c.wantD = cur, 0
		return
	}
	n := r.Int64()
	c.wantN, c.wantD, c.applied = n, d.Int64(), true
	exp := m.exp
	switch c.unit {
	case "PERSIST":
		exp = 0
	case "EX", "PX", "EXAT", "PXAT":
		abs := map[string]int64{"EX": now + c.amount*1000, "PX": now + c.amount,
			"EXAT": c.amount * 1000, "PXAT": c.amount}[c.unit]
		if !c.enx || !m.exists || m.exp == 0 {
			exp = abs
		}
	}
	*m = increxModel{exists: true, val: n, exp: exp}
}

// genIncrex draws an INCREX call: increments and bounds near zero, near
// the int64 limits, or anywhere; options present or not, in random order.
func genIncrex(rng *rand.Rand, now int64) *increxCall {
	num := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return int64(rng.IntN(21)) - 10
		case 1:
			return math.MaxInt64 - int64(rng.IntN(5))
		case 2:
			return math.MinInt64 + int64(rng.IntN(5))
		}
		return int64(rng.Uint64())
	}
	ptr := func(p float64) *int64 {
		if rng.Float64() < p {
			v := num()
			return &v
		}
		return nil
	}
	c := &increxCall{incr: ptr(0.8), lb: ptr(0.4), ub: ptr(0.4), saturate: rng.IntN(3) == 0}
	var opts [][]string
	if c.incr != nil {
		opts = append(opts, []string{"BYINT", strconv.FormatInt(*c.incr, 10)})
	}
	if c.lb != nil {
		opts = append(opts, []string{"LBOUND", strconv.FormatInt(*c.lb, 10)})
	}
	if c.ub != nil {
		opts = append(opts, []string{"UBOUND", strconv.FormatInt(*c.ub, 10)})
	}
	if c.saturate {
		opts = append(opts, []string{"SATURATE"})
	}
	switch rng.IntN(6) {
	case 0:
		c.unit, c.amount = "EX", int64(1+rng.IntN(5))
	case 1:
		c.unit, c.amount = "PX", int64(1+rng.IntN(5000))
	case 2:
		c.unit, c.amount = "EXAT", now/1000+int64(1+rng.IntN(5))
	case 3:
		c.unit, c.amount = "PXAT", now+int64(1+rng.IntN(5000))
	case 4:
		c.unit = "PERSIST"
	}
	switch c.unit {
	case "":
	case "PERSIST":
		opts = append(opts, []string{"PERSIST"})
	default:
		opts = append(opts, []string{c.unit, strconv.FormatInt(c.amount, 10)})
		c.enx = rng.IntN(2) == 0
		if c.enx {
			opts = append(opts, []string{"ENX"})
		}
	}
	rng.Shuffle(len(opts), func(i, j int) { opts[i], opts[j] = opts[j], opts[i] })
	c.args = []string{"INCREX", "k"}
	for _, o := range opts {
		c.args = append(c.args, o...)
	}
	return c
}

// TestIncrexModel checks INCREX against increxModel: random calls on one
// key, with the clock moving so that keys expire; after each call the
// reply, the value (GET) and the expiry (PEXPIRETIME) must be the model's.
// 20000 calls from a fixed seed (the test logs how many were applied,
// skipped, saturated and refused).
func TestIncrexModel(t *testing.T) {
	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	c := resptest.MustDial(t, addr)
	rng := rand.New(rand.NewPCG(88, 30))
	var m increxModel
	counts := map[string]int{}
	const calls = 20000
	for i := 0; i < calls; i++ {
		if rng.IntN(4) == 0 {
			clk.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		now := clk.Now().UnixMilli()
		call := genIncrex(rng, now)
		m.apply(call, now)
		got := c.MustDo(t, call.args...)
		switch {
		case call.wantErr != "":
			counts["error"]++
			if got.Kind != '-' || got.Str != call.wantErr {
				t.Fatalf("call %d %v: %v, want error %q", i, call.args, got, call.wantErr)
			}
			continue
		case call.applied:
			counts["applied"]++
			if call.wantD != 0 && call.incr != nil && call.wantD != *call.incr {
				counts["saturated"]++
			}
		default:
			counts["skipped"]++
		}
		want := "*2 :" + strconv.FormatInt(call.wantN, 10) + " :" + strconv.FormatInt(call.wantD, 10)
		if s := flat(got); s != want {
			t.Fatalf("call %d %v (model %+v): %s, want %s", i, call.args, m, s, want)
		}
		val := c.MustDo(t, "GET", "k")
		exp := c.MustDo(t, "PEXPIRETIME", "k")
		wantVal, wantExp := "$-1", ":-2"
		if m.exists {
			wantVal, wantExp = "$"+strconv.FormatInt(m.val, 10), ":-1"
			if m.exp != 0 {
				wantExp = ":" + strconv.FormatInt(m.exp, 10)
			}
		}
		if s := flat(val) + " " + flat(exp); s != wantVal+" "+wantExp {
			t.Fatalf("call %d %v: GET, PEXPIRETIME %s, want %s %s", i, call.args, s, wantVal, wantExp)
		}
	}
	t.Logf("%d INCREX calls checked against the model: %v", calls, counts)
	for _, k := range []string{"applied", "skipped", "saturated", "error"} {
		if counts[k] == 0 {
			t.Errorf("no %s call generated: %v", k, counts)
		}
	}
}

// flat writes a reply as "kind+text" tokens: "*2 :1 :1", "$v", "$-1".
func flat(v resptest.Value) string {
	switch {
	case v.Kind == '*':
		s := "*" + strconv.Itoa(len(v.Elems))
		for _, e := range v.Elems {
			s += " " + flat(e)
		}
		return s
	case v.Null:
		return string(v.Kind) + "-1"
	}
	return string(v.Kind) + v.Str
}
