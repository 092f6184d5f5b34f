package durability

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
)

// checkpointEvery is the --checkpoint-bytes of TestCrashRecoveryCheckpoints:
// small enough that a checkpoint starts every few hundred changes, so the
// kills land before, during and after checkpoints.
const checkpointEvery = "16kb"

// TestCrashRecoveryCheckpoints is TestCrashRecovery's rounds with frequent
// checkpoints (--checkpoint-bytes 16kb instead of 64mb): after each SIGKILL
// every key holds a state it really had, with always its last
// acknowledged one (or its in-flight write's); after SIGTERM nothing is
// lost. The saturated subtests add TestCrashUnderBackpressure's flood.
func TestCrashRecoveryCheckpoints(t *testing.T) {
	binproc.Binary(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for mi, mode := range []string{"always", "everysec", "no"} {
		t.Run(mode, func(t *testing.T) {
			crashMode(t, mode, rand.New(rand.NewPCG(seed, uint64(20+mi))), nil, "--checkpoint-bytes", checkpointEvery)
		})
	}
	for mi, mode := range []string{"always", "everysec"} {
		t.Run(mode+"-saturated", func(t *testing.T) {
			crashMode(t, mode, rand.New(rand.NewPCG(seed, uint64(30+mi))), &saturation{
				args:     []string{"--persist-max-pending-bytes", strconv.Itoa(satCap)},
				flooders: 4,
			}, "--checkpoint-bytes", checkpointEvery)
		})
	}
}
