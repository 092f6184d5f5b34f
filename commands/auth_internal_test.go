package commands

import (
	"strconv"
	"strings"
	"testing"
)

// TestCheckPassword: the digest comparison accepts exactly the password,
// for the default user or none, and refuses wrong, empty, prefix, longer
// and case-changed guesses, including for a 4 KiB password.
func TestCheckPassword(t *testing.T) {
	cases := 0
	for _, pass := range []string{"s3cret", strings.Repeat("p", 4096), "\x00\xff binary"} {
		s, err := New(Config{Password: pass})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			user, guess string
			ok          bool
		}{
			{"", pass, true},
			{"default", pass, true},
			{"admin", pass, false},
			{"", "", false},
			{"", "wrong", false},
			{"", pass[:len(pass)-1], false},
			{"", pass + "x", false},
			{"", pass + "\x00", false},
			{"", strings.ToUpper(pass), strings.ToUpper(pass) == pass},
			{"", pass[:1], false},
		} {
			var user []byte
			if tc.user != "" {
				user = []byte(tc.user)
			}
			if got := checkPassword(s, user, []byte(tc.guess)); got != tc.ok {
				t.Errorf("password %.10q: user %q guess %.10q (len %d): %v, want %v", pass, tc.user, tc.guess, len(tc.guess), got, tc.ok)
			}
			cases++
		}
	}
	t.Logf("%d cases", cases)
}

// BenchmarkCheckPassword compares guesses with a 4 KiB password. With the
// digests the time depends only on the guess's own length (hashing it):
// not on how many leading bytes are right (prefix=...), nor on whether
// its length is the password's (len=...).
func BenchmarkCheckPassword(b *testing.B) {
	pass := strings.Repeat("p", 4096)
	s, err := New(Config{Password: pass})
	if err != nil {
		b.Fatal(err)
	}
	run := func(name string, guess []byte) {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				if checkPassword(s, nil, guess) {
					b.Fatal("accepted")
				}
			}
		})
	}
	for _, right := range []int{0, 1024, 2048, 4095} {
		g := []byte(strings.Repeat("q", 4096))
		copy(g, pass[:right])
		run("prefix="+strconv.Itoa(right), g)
	}
	for _, n := range []int{1, 4095, 4097} {
		run("len="+strconv.Itoa(n), []byte(strings.Repeat("q", n)))
	}
}

// checkPassword checks a password for user (nil: the default user).
func checkPassword(s *Service, user, pass []byte) bool {
	if user == nil {
		user = []byte("default")
	}
	return s.checkCredentials(user, pass) != nil
}
