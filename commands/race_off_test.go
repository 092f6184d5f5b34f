//go:build !race

package commands_test

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = false
