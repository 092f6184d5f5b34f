package server_test

import (
	"context"
	"testing"

	"github.com/cellserver/cellserver/server"
)

// TestPaceReplicated: CL.PACE's bookings reach a replica as the key's
// state, byte for byte, expiry included, and CL.THROTTLE on the replica's
// copy (after a promotion) sees the booked turns.
func TestPaceReplicated(t *testing.T) {
	ctx := context.Background()
	primary := startNode(t, server.Config{})
	ph, pp := primary.hostPort()
	replica := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
	for i := range 5 {
		// One an hour, no burst, up to 3 h of waiting: the first four are
		// booked (the last three ahead), the fifth refused.
		v, err := primary.rdb.Do(ctx, "CL.PACE", "paced", 0, 1, "1h", "MAXWAIT", "3h").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if limited := v[0] == 1; limited != (i == 4) {
			t.Fatalf("CL.PACE %d: %v", i, v)
		}
	}
	waitInSync(t, primary, replica)
	if n := sameState(t, primary, replica); n != 1 {
		t.Fatalf("%d keys compared, want 1", n)
	}
	if err := replica.rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	v, err := replica.rdb.Do(ctx, "CL.THROTTLE", "paced", 0, 1, 3600).Int64Slice()
	if err != nil || v[0] != 1 || v[3] < 3*3600-60 {
		t.Errorf("CL.THROTTLE on the promoted replica: %v %v, want limited for about 3 h", v, err)
	}
}
