//go:build race

package hostile_test

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
