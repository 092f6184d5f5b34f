package clustertool

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// MigrationState is one migration as CELLCLUSTER SLOT-MIGRATION-STATUS
// reports it: [direction, peer_id, state, keys_migrated, error,
// slot_ranges].
type MigrationState struct {
	Direction string `json:"direction"`
	Peer      string `json:"peer"`
	State     string `json:"state"` // CONNECTING, SYNC, FINISHED, ERROR, FATAL
	Keys      int64  `json:"keys_migrated"`
	Error     string `json:"error,omitempty"`
	Ranges    string `json:"slot_ranges"`
}

// errNoMigration: the node does not know the migration asked about.
var errNoMigration = errors.New("the node reports no such migration")

// migrationState reads the migration to peer of slots ranges on the node
// at addr (the entry whose slot_ranges is ranges, else the only one with
// that peer).
func (t *Tool) migrationState(addr, peer, ranges string) (MigrationState, error) {
	c, err := t.Dialer.Dial(addr)
	if err != nil {
		return MigrationState{}, fmt.Errorf("%s: %w", addr, err)
	}
	defer c.Close()
	return readMigration(c, peer, ranges)
}

func readMigration(c *Conn, peer, ranges string) (MigrationState, error) {
	v, err := c.Do("CELLCLUSTER", "SLOT-MIGRATION-STATUS", peer)
	if err != nil {
		return MigrationState{}, fmt.Errorf("%s: CELLCLUSTER SLOT-MIGRATION-STATUS: %w", c.Addr, err)
	}
	list, _ := v.([]any)
	var found []MigrationState
	for _, e := range list {
		f, ok := e.([]any)
		if !ok || len(f) < 6 {
			return MigrationState{}, fmt.Errorf("%s: CELLCLUSTER SLOT-MIGRATION-STATUS: unexpected entry %v", c.Addr, e)
		}
		var m MigrationState
		m.Direction, _ = f[0].(string)
		m.Peer, _ = f[1].(string)
		m.State, _ = f[2].(string)
		m.Keys, _ = f[3].(int64)
		m.Error, _ = f[4].(string)
		m.Ranges, _ = f[5].(string)
		if m.Peer != peer {
			continue
		}
		if m.Ranges == ranges {
			return m, nil
		}
		found = append(found, m)
	}
	if len(found) == 1 {
		return found[0], nil
	}
	return MigrationState{}, errNoMigration
}

// MoveResult is one migration the tool drove.
type MoveResult struct {
	From     string        `json:"from"`
	To       string        `json:"to"`
	Slots    int           `json:"slots"`
	Ranges   string        `json:"slot_ranges"`
	Keys     int64         `json:"keys_migrated"`
	Duration time.Duration `json:"duration_ns"`
}

// Reshard moves n slots (the lowest) of the master from to the master to
// (ids, or unique prefixes of 8 digits or more), through the cluster addr
// belongs to: opening topology, migration until FINISHED, closing
// topology (Tool's model). The keys move with their state.
func (t *Tool) Reshard(addr, from, to string, n int) error {
	top, err := t.topologyAt(addr)
	if err != nil {
		return err
	}
	fi, ti := top.Master(from), top.Master(to)
	switch {
	case from == "" || to == "":
		return errors.New("reshard needs --from ID and --to ID")
	case fi < 0:
		return fmt.Errorf("--from %s: no master (or more than one) has this id", from)
	case ti < 0:
		return fmt.Errorf("--to %s: no master (or more than one) has this id", to)
	case fi == ti:
		return errors.New("--from and --to are the same master")
	case n < 1:
		return errors.New("--slots must be at least 1")
	case n > top.SlotCount(fi):
		return fmt.Errorf("--slots %d: %s has only %d slots", n, top[fi].Master.Addr(), top.SlotCount(fi))
	}
	if err := openMigrations(top); err != nil {
		return err
	}
	slots := top.SlotList(fi)[:n]
	t.logf("Moving %d slots (%s) from %s (%s) to %s (%s)", n, FormatRanges(Ranges(slots)),
		top[fi].Master.Addr(), top[fi].Master.ID, top[ti].Master.Addr(), top[ti].Master.ID)
	if err := t.confirm("Do you want to proceed with the proposed reshard plan?"); err != nil {
		return err
	}
	_, res, err := t.migrate(top, fi, ti, slots)
	if err != nil {
		return err
	}
	return t.emit(map[string]any{"moves": []MoveResult{res}})
}

// openMigrations refuses a topology that already declares a migration.
func openMigrations(top Topology) error {
	for _, s := range top {
		if len(s.Migrations) > 0 {
			return fmt.Errorf("the topology already declares a migration from %s (slots %s): run check", s.Master.Addr(), FormatRanges(s.Migrations[0].SlotRanges))
		}
	}
	return nil
}

// migrate moves slots from shard fi to shard ti of top and returns the
// closing topology. On FATAL, or when the migration has not finished
// within MigrationTimeout, it pushes top again (which cancels the
// migration: the slots stay on the source) and fails.
func (t *Tool) migrate(top Topology, fi, ti int, slots []int) (Topology, MoveResult, error) {
	src, dst := top[fi].Master, top[ti].Master
	ranges := Ranges(slots)
	rs := FormatRanges(ranges)
	res := MoveResult{From: src.ID, To: dst.ID, Slots: len(slots), Ranges: rs}
	open := top.Clone()
	open[fi].Migrations = []Migration{{SlotRanges: ranges, NodeID: dst.ID, IP: dst.IP, Port: dst.Port}}
	start := time.Now()
	if err := t.push(open); err != nil {
		t.cancel(top)
		return nil, res, err
	}
	t.logf(">>> Migration of %d slots %s -> %s declared", len(slots), src.Addr(), dst.Addr())
	timeout, poll := t.MigrationTimeout, t.Poll
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	deadline := start.Add(timeout)
	var last MigrationState
	var lastErr error
	for {
		st, err := t.migrationState(src.Addr(), dst.ID, rs)
		if err == nil {
			if st != last {
				t.logf("    %s: %s, %d keys migrated%s", src.Addr(), st.State, st.Keys, errSuffix(st.Error))
			}
			last, lastErr = st, nil
			switch st.State {
			case "FINISHED":
				res.Keys, res.Duration = st.Keys, time.Since(start)
				closing := top.move(fi, ti, slots)
				if err := t.push(closing); err != nil {
					return nil, res, fmt.Errorf("the migration finished but the closing topology was not taken everywhere (push it to those nodes once they are back: CELLCLUSTER GETCONFIG from a node that took it, CELLCLUSTER CONFIG on them): %w", err)
				}
				t.logf(">>> %d slots moved %s -> %s: %d keys in %v", len(slots), src.Addr(), dst.Addr(), st.Keys, res.Duration.Round(time.Millisecond))
				return closing, res, nil
			case "FATAL":
				t.cancel(top)
				return nil, res, fmt.Errorf("migration %s -> %s failed (FATAL): %s; cancelled: the slots stay on %s", src.Addr(), dst.Addr(), st.Error, src.Addr())
			}
			if tst, err := t.migrationState(dst.Addr(), src.ID, rs); err == nil && tst.State == "FATAL" {
				t.cancel(top)
				return nil, res, fmt.Errorf("migration %s -> %s failed on the target (FATAL): %s; cancelled: the slots stay on %s", src.Addr(), dst.Addr(), tst.Error, src.Addr())
			}
		} else if lastErr == nil || err.Error() != lastErr.Error() {
			t.logf("    %s: %v (retrying)", src.Addr(), err)
			lastErr = err
		}
		if time.Now().After(deadline) {
			t.cancel(top)
			why := last.State + errSuffix(last.Error)
			if lastErr != nil {
				why = lastErr.Error()
			}
			return nil, res, fmt.Errorf("migration %s -> %s not finished after %v (last: %s); cancelled: the slots stay on %s", src.Addr(), dst.Addr(), timeout, why, src.Addr())
		}
		time.Sleep(poll)
	}
}

// cancel pushes top (without the migration) back, logging what fails.
func (t *Tool) cancel(top Topology) {
	if err := t.push(top); err != nil {
		t.logf("[ERR] cancelling the migration: %v", err)
	}
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " (" + e + ")"
}

// Rebalance moves slots so that the masters hold shares proportional to
// their weights (1 unless weights names them by id or prefix; 0 empties
// a master), masters without slots included. Nothing moves when every
// master is within threshold percent of its share (redis-cli's
// --cluster-threshold, default 2). Slots move one migration at a time,
// from the master with the largest surplus to the one with the largest
// deficit, each taking the highest slots of its source.
func (t *Tool) Rebalance(addr string, weights map[string]float64, threshold float64) error {
	top, err := t.topologyAt(addr)
	if err != nil {
		return err
	}
	if err := openMigrations(top); err != nil {
		return err
	}
	w := make([]float64, len(top))
	for i := range w {
		w[i] = 1
	}
	for id, x := range weights {
		i := top.Master(id)
		if i < 0 {
			return fmt.Errorf("--weight %s: no master (or more than one) has this id", id)
		}
		if x < 0 {
			return fmt.Errorf("--weight %s=%v: must not be negative", id, x)
		}
		w[i] = x
	}
	var total float64
	for _, x := range w {
		total += x
	}
	if total == 0 {
		return errors.New("every weight is 0")
	}
	want := make([]int, len(top))
	given := 0
	for i := range top {
		want[i] = int(float64(Slots) * w[i] / total)
		given += want[i]
	}
	for i := 0; given < Slots; i = (i + 1) % len(top) {
		if w[i] > 0 {
			want[i]++
			given++
		}
	}
	balance := make([]int, len(top))
	over := false
	for i := range top {
		balance[i] = top.SlotCount(i) - want[i]
		if want[i] == 0 {
			over = over || balance[i] != 0
		} else if d := float64(abs(balance[i])) / float64(want[i]) * 100; d > threshold {
			over = true
		}
	}
	if !over {
		t.logf("*** No rebalancing needed: every master is within %v%% of its share.", threshold)
		return t.emit(map[string]any{"moves": []MoveResult{}})
	}
	type move struct{ from, to, n int }
	var plan []move
	bal := append([]int(nil), balance...)
	for {
		src, dst := -1, -1
		for i := range bal {
			if bal[i] > 0 && (src < 0 || bal[i] > bal[src]) {
				src = i
			}
			if bal[i] < 0 && (dst < 0 || bal[i] < bal[dst]) {
				dst = i
			}
		}
		if src < 0 || dst < 0 {
			break
		}
		n := min(bal[src], -bal[dst])
		plan = append(plan, move{src, dst, n})
		bal[src] -= n
		bal[dst] += n
	}
	for _, m := range plan {
		t.logf("Move %d slots from %s to %s", m.n, top[m.from].Master.Addr(), top[m.to].Master.Addr())
	}
	if err := t.confirm("Do you want to proceed with the proposed rebalance plan?"); err != nil {
		return err
	}
	var done []MoveResult
	for _, m := range plan {
		slots := top.SlotList(m.from)
		slots = slots[len(slots)-m.n:]
		next, res, err := t.migrate(top, m.from, m.to, slots)
		if err != nil {
			return fmt.Errorf("after %d of %d moves: %w", len(done), len(plan), err)
		}
		top = next
		done = append(done, res)
	}
	var parts []string
	for i, s := range top {
		parts = append(parts, fmt.Sprintf("%s %d", s.Master.Addr(), top.SlotCount(i)))
	}
	t.logf("[OK] Rebalanced: %s slots.", strings.Join(parts, ", "))
	return t.emit(map[string]any{"moves": done})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// topologyAt reads the topology of the node at addr (HOST:PORT).
func (t *Tool) topologyAt(addr string) (Topology, error) {
	a, err := resolve(addr)
	if err != nil {
		return nil, err
	}
	return t.readTopology(a.Addr())
}
