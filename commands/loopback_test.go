package commands

import "testing"

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:6379": true, "127.8.9.10:1": true, "[::1]:6379": true,
		"10.0.0.1:6379": false, "192.168.1.2:5": false, "[2001:db8::1]:6379": false,
		"[::ffff:127.0.0.1]:1": true, "8.8.8.8:53": false, "": true, "garbage": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
