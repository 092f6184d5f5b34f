package streams

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// ledger is what the clients saw of one stream and its group, in the
// order they saw it, and the invariants of at-least-once delivery:
//
//   - an entry whose XACK answered 1, durably (see acked), is never
//     delivered to the group again: not by ">", not by a consumer's
//     history (ID 0), not by XCLAIM or XAUTOCLAIM, and XPENDING does not
//     list it;
//   - ">" never delivers an entry twice once its delivery was durable;
//   - every entry the producer saw added durably is delivered, and
//     acknowledged, by the end;
//   - a delivered entry is one the producer added, with its value.
//
// A strict ledger (the restart scenario, where every reply is final) also
// knows the pending entries exactly: pendingExact compares XPENDING with
// them, their owners and delivery counts. A lenient one (the failover
// scenario, where a command whose connection broke may or may not have
// taken effect) knows bounds: an acknowledged entry is not pending, an
// entry durably delivered and not acknowledged (nor sent to XACK) is.
type ledger struct {
	strict bool
	step   int // one per delivery or acknowledgement seen

	ids       []string          // entries added durably, in order
	value     map[string]string // their value of i, by ID
	sent      map[string]bool   // every i sent to XADD, whatever the answer
	uncertain int               // XADDs without a durable answer

	deliveries map[string]int64  // deliveries seen, by ID
	history    map[string]int64  // of which by a history read (ID 0)
	owner      map[string]string // the consumer of the last delivery seen
	byNew      map[string]int    // step of the durable delivery by ">"
	mustPend   map[string]bool   // durably delivered, no XACK sent since
	ackedAt    map[string]int    // step of the durable XACK answering 1
	ackSent    map[string]bool   // an XACK was sent (whatever came back)
	zeroAcks   int               // XACKs answering 0 (lenient ledger only)

	violations []string
	notes      []string // what a check allowed, for the log
}

func newLedger(strict bool) *ledger {
	return &ledger{strict: strict, value: map[string]string{}, sent: map[string]bool{},
		deliveries: map[string]int64{}, history: map[string]int64{}, owner: map[string]string{}, byNew: map[string]int{},
		mustPend: map[string]bool{}, ackedAt: map[string]int{}, ackSent: map[string]bool{}}
}

func (l *ledger) violate(format string, args ...any) {
	l.violations = append(l.violations, fmt.Sprintf("step %d: ", l.step)+fmt.Sprintf(format, args...))
}

// durable says whether a write's answer r is final: no error and, when
// the client sent WAIT 1 after it, one replica acknowledged it.
func durable(r response, wait bool) bool { return r.Err == "" && (!wait || r.Waited >= 1) }

// added records the answer r to XADD of i.
func (l *ledger) added(i int, r response, wait bool) {
	l.sent[strconv.Itoa(i)] = true
	if !durable(r, wait) {
		l.uncertain++
		return
	}
	if _, dup := l.value[r.ID]; dup {
		l.violate("XADD answered %s twice", r.ID)
	}
	l.ids = append(l.ids, r.ID)
	l.value[r.ID] = strconv.Itoa(i)
}

// delivered records entries delivered to consumer by via (">", "0",
// "XCLAIM", "XAUTOCLAIM"); durable says the server's record of the
// delivery is final (for ">": the group's last delivered ID moved past
// them for good).
func (l *ledger) delivered(consumer, via string, es []entry, durable bool) {
	for _, e := range es {
		l.step++
		if at, ok := l.ackedAt[e.ID]; ok {
			l.violate("%s delivered to %s by %s, though acknowledged at step %d", e.ID, consumer, via, at)
		}
		if v, ok := l.value[e.ID]; ok && v != e.I {
			l.violate("%s delivered with i=%q, added with i=%q", e.ID, e.I, v)
		} else if !ok && !l.sent[e.I] {
			l.violate("%s (i=%q) delivered, never added", e.ID, e.I)
		}
		if via == ">" {
			if at, ok := l.byNew[e.ID]; ok {
				l.violate("%s delivered to %s by \">\" again (first at step %d)", e.ID, consumer, at)
			}
			if durable {
				l.byNew[e.ID] = l.step
			}
		}
		l.deliveries[e.ID]++
		if via == "0" {
			l.history[e.ID]++
		}
		l.owner[e.ID] = consumer
		if durable {
			l.mustPend[e.ID] = true
		}
	}
}

// acked records the answer r to XACK of id. It reports whether the
// XACK is settled (an answer came; otherwise send it again later).
func (l *ledger) acked(id string, r response, wait bool) bool {
	l.step++
	l.ackSent[id] = true
	delete(l.mustPend, id)
	if r.Err != "" {
		return false
	}
	switch {
	case r.N == 1 && durable(r, wait):
		l.ackedAt[id] = l.step
	case r.N == 1:
		// Answered, not known to be on a replica: it may come back.
	case r.N == 0 && l.strict:
		l.violate("XACK %s answered 0: it was not pending", id)
	case r.N == 0:
		// An earlier XACK of it (or the client's own resend after a
		// reconnect) may have taken effect.
		l.zeroAcks++
	default:
		l.violate("XACK %s answered %d", id, r.N)
	}
	return true
}

// pendingModel is the strict ledger's pending entries: delivered, never
// sent to XACK; with their owner and delivery count.
func (l *ledger) pendingModel() []pendingPE {
	var out []pendingPE
	for id, n := range l.deliveries {
		if !l.ackSent[id] {
			out = append(out, pendingPE{id, l.owner[id], n})
		}
	}
	slices.SortFunc(out, func(a, b pendingPE) int { return cmpID(a.ID, b.ID) })
	return out
}

// pendingOf is pendingModel's IDs owned by consumer ("" for all), in ID
// order.
func (l *ledger) pendingOf(consumer string) []string {
	var out []string
	for _, p := range l.pendingModel() {
		if consumer == "" || p.Consumer == consumer {
			out = append(out, p.ID)
		}
	}
	return out
}

// checkPending checks an XPENDING answer (what says when): a strict
// ledger wants exactly pendingModel; any ledger wants no acknowledged
// entry and every durably delivered entry not sent to XACK.
func (l *ledger) checkPending(what string, rows []pendingPE) {
	if l.strict {
		// Redis 7.0 does not propagate the delivery count a history
		// read adds (XREADGROUP ... 0): its AOF and replicas do not
		// have it. A count may be short of the model by those.
		want := l.pendingModel()
		match := len(rows) == len(want)
		short := 0
		for i := 0; match && i < len(rows); i++ {
			h, w := rows[i], want[i]
			match = h.ID == w.ID && h.Consumer == w.Consumer && h.Count <= w.Count && h.Count >= w.Count-l.history[w.ID]
			if h.Count < w.Count {
				short++
			}
		}
		if !match {
			l.violate("%s: XPENDING differs from the model: %s", what, diffRows(rows, want))
		} else if short > 0 {
			l.notes = append(l.notes, fmt.Sprintf("%s: %d of %d delivery counts short by their history reads", what, short, len(rows)))
		}
		return
	}
	have := map[string]bool{}
	for _, p := range rows {
		have[p.ID] = true
		if at, ok := l.ackedAt[p.ID]; ok {
			l.violate("%s: XPENDING lists %s (owner %s), acknowledged at step %d", what, p.ID, p.Consumer, at)
		}
	}
	for id := range l.mustPend {
		if !have[id] {
			l.violate("%s: XPENDING lacks %s, delivered durably to %s and never acknowledged", what, id, l.owner[id])
		}
	}
}

// checkEntries wants es to be exactly the entries of ids, in order.
func (l *ledger) checkEntries(what string, es []entry, ids []string) {
	got := make([]string, len(es))
	for i, e := range es {
		got[i] = e.ID
	}
	if !slices.Equal(got, ids) {
		l.violate("%s: got %d entries %v, want %d %v", what, len(got), short(got), len(ids), short(ids))
	}
}

// checkDone: every entry added durably was delivered and acknowledged (a
// lenient ledger counts an XACK sent whose answer was not final).
func (l *ledger) checkDone() {
	for _, id := range l.ids {
		if l.deliveries[id] == 0 {
			l.violate("%s (i=%s) never delivered", id, l.value[id])
		} else if _, ok := l.ackedAt[id]; !ok && (l.strict || !l.ackSent[id]) {
			l.violate("%s (i=%s) never acknowledged", id, l.value[id])
		}
	}
}

// report fails t with every violation (the first 30) and logs a summary.
func (l *ledger) report(t *testing.T) {
	t.Helper()
	var delivered, redelivered int
	for _, n := range l.deliveries {
		delivered++
		if n > 1 {
			redelivered++
		}
	}
	t.Logf("ledger: %d entries added durably (%d XADDs uncertain), %d delivered (%d more than once), %d acknowledged durably, %d XACKs answered 0",
		len(l.ids), l.uncertain, delivered, redelivered, len(l.ackedAt), l.zeroAcks)
	for _, n := range l.notes {
		t.Log(n)
	}
	for i, v := range l.violations {
		if i == 30 {
			t.Errorf("... and %d more violations", len(l.violations)-30)
			break
		}
		t.Errorf("violation: %s", v)
	}
}

// diffRows lists the XPENDING rows only in have and only in want.
func diffRows(have, want []pendingPE) string {
	in := func(s []pendingPE, p pendingPE) bool { return slices.Contains(s, p) }
	var extra, missing []pendingPE
	for _, p := range have {
		if !in(want, p) {
			extra = append(extra, p)
		}
	}
	for _, p := range want {
		if !in(have, p) {
			missing = append(missing, p)
		}
	}
	return fmt.Sprintf("%d rows, want %d; only in XPENDING %s; missing %s", len(have), len(want), short(extra), short(missing))
}

// short prints a long list by its ends.
func short[T any](s []T) string {
	if len(s) <= 12 {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%v ... %v", s[:6], s[len(s)-6:])
}

// cmpID orders stream IDs ms-seq numerically.
func cmpID(a, b string) int {
	pa, pb := parseID(a), parseID(b)
	for i := range pa {
		if pa[i] != pb[i] {
			if pa[i] < pb[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func parseID(s string) [2]uint64 {
	var ms, seq uint64
	fmt.Sscanf(s, "%d-%d", &ms, &seq)
	return [2]uint64{ms, seq}
}

// TestLedgerCatches feeds the ledger histories that break each invariant:
// every one must be reported (the scenarios' checks can fail).
func TestLedgerCatches(t *testing.T) {
	add := func(l *ledger, n int) {
		for i := range n {
			l.added(i, response{ID: fmt.Sprintf("1-%d", i), Waited: -1}, false)
		}
	}
	es := func(ids ...int) []entry {
		var out []entry
		for _, i := range ids {
			out = append(out, entry{fmt.Sprintf("1-%d", i), strconv.Itoa(i)})
		}
		return out
	}
	ok := response{N: 1, Waited: -1}
	cases := []struct {
		name   string
		strict bool
		run    func(l *ledger)
	}{
		{"acked entry redelivered by >", true, func(l *ledger) {
			add(l, 2)
			l.delivered("c1", ">", es(0, 1), true)
			l.acked("1-0", ok, false)
			l.delivered("c2", ">", es(0), true)
		}},
		{"acked entry in a history read", false, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", es(0), true)
			l.acked("1-0", ok, false)
			l.delivered("c1", "0", es(0), true)
		}},
		{"acked entry claimed", false, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", es(0), true)
			l.acked("1-0", ok, false)
			l.delivered("c9", "XAUTOCLAIM", es(0), true)
		}},
		{"pending entry delivered twice by >", false, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", es(0), true)
			l.delivered("c2", ">", es(0), true)
		}},
		{"acked entry still pending", false, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", es(0), true)
			l.acked("1-0", ok, false)
			l.checkPending("test", []pendingPE{{"1-0", "c1", 1}})
		}},
		{"pending entry lost", false, func(l *ledger) {
			add(l, 2)
			l.delivered("c1", ">", es(0, 1), true)
			l.acked("1-0", ok, false)
			l.checkPending("test", nil)
		}},
		{"pending with the wrong count", true, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", es(0), true)
			l.checkPending("test", []pendingPE{{"1-0", "c1", 2}})
		}},
		{"never delivered", false, func(l *ledger) {
			add(l, 2)
			l.delivered("c1", ">", es(0), true)
			l.acked("1-0", ok, false)
			l.checkDone()
		}},
		{"never acknowledged", true, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", es(0), true)
			l.checkDone()
		}},
		{"ack answering 0 (strict)", true, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", es(0), true)
			l.acked("1-0", response{N: 0, Waited: -1}, false)
		}},
		{"wrong value", false, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", []entry{{"1-0", "7"}}, true)
		}},
		{"unknown entry", false, func(l *ledger) {
			add(l, 1)
			l.delivered("c1", ">", []entry{{"2-0", "99"}}, true)
		}},
	}
	for _, c := range cases {
		l := newLedger(c.strict)
		c.run(l)
		if len(l.violations) == 0 {
			t.Errorf("%s: not reported", c.name)
		} else {
			t.Logf("%s: %s", c.name, l.violations[0])
		}
	}
	// And a history that keeps every invariant is clean.
	l := newLedger(true)
	add(l, 3)
	l.delivered("c1", ">", es(0, 1, 2), true)
	l.acked("1-0", ok, false)
	l.checkPending("test", []pendingPE{{"1-1", "c1", 1}, {"1-2", "c1", 1}})
	l.delivered("c2", "XCLAIM", es(1, 2), true)
	l.acked("1-1", ok, false)
	l.acked("1-2", ok, false)
	l.checkPending("test", nil)
	l.checkDone()
	if len(l.violations) != 0 {
		t.Errorf("a clean history reported: %v", l.violations)
	}
}
