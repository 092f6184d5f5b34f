package keyslot

import "testing"

// TestKnownSlots: values from Redis's documentation and CLUSTER KEYSLOT
// of Redis 7.0.15.
func TestKnownSlots(t *testing.T) {
	if got := CRC16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("CRC16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]uint16{
		"123456789":            12739,
		"{tenant42}:login":     14826,
		"foo":                  12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           8363,
		"foo{{bar}}zap":        4015,
		"foo{bar}{zap}":        5061,
		"":                     0,
	} {
		if got := Of([]byte(key)); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}
