//go:build !race

package hostile

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = false
