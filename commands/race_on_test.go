//go:build race

package commands_test

// raceEnabled: this test binary runs under the race detector, whose
// sync.Pool drops some of what is put back (so a pooled buffer is
// sometimes allocated anew).
const raceEnabled = true
