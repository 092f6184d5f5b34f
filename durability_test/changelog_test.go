package durability_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestCrashRecoveryChangeLog is TestCrashRecovery's rounds with the
// change log prototype on (CELLSERVER_CHANGELOG=1, see package
// persistence/changelog) and a checkpoint every 300 ms, so that kills land
// before, during and after checkpoints: after each SIGKILL every key holds
// a state it really had, with always its last acknowledged one (or its
// in-flight write's); after SIGTERM nothing is lost. The saturated
// subtests add TestCrashUnderBackpressure's flood.
func TestCrashRecoveryChangeLog(t *testing.T) {
	needBinary(t)
	t.Setenv("CELLSERVER_CHANGELOG", "1")
	t.Setenv("CELLSERVER_CHANGELOG_INTERVAL", "300ms")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for mi, mode := range []string{"always", "everysec", "no"} {
		t.Run(mode, func(t *testing.T) {
			crashMode(t, mode, rand.New(rand.NewPCG(seed, uint64(20+mi))), nil)
		})
	}
	for mi, mode := range []string{"always", "everysec"} {
		t.Run(mode+"-saturated", func(t *testing.T) {
			crashMode(t, mode, rand.New(rand.NewPCG(seed, uint64(30+mi))), &saturation{
				args:     []string{"--persist-max-pending-bytes", strconv.Itoa(satCap)},
				flooders: 4,
			})
		})
	}
}
