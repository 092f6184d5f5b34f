package commands_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/commands"
)

// send runs one command on l and returns its reply.
func send(t *testing.T, l *commands.Local, args ...string) (string, error) {
	t.Helper()
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	l.Send(b)
	out, err := l.Replies()
	return string(out), err
}

// TestLocal: an in-process client goes through the dispatcher as a
// connection: NOAUTH before AUTH, the ACL check as its user (NOPERM),
// replies in RESP2, and once its user is removed it runs nothing more
// (a connection would have been disconnected).
func TestLocal(t *testing.T) {
	s, err := commands.New(commands.Config{Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	admin := s.NewLocal()
	defer admin.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"CL.THROTTLE", "a:1", "1", "1", "1"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"AUTH", "pw"}, "+OK\r\n"},
		{[]string{"ACL", "SETUSER", "u", "on", ">p", "~a:*", "+@rate_limit"}, "+OK\r\n"},
	} {
		if got, err := send(t, admin, c.args...); got != c.want || err != nil {
			t.Fatalf("%v = %q, %v; want %q", c.args, got, err, c.want)
		}
	}
	u := s.NewLocal()
	defer u.Close()
	if got, _ := send(t, u, "AUTH", "u", "p"); got != "+OK\r\n" {
		t.Fatalf("AUTH u = %q", got)
	}
	if got, _ := send(t, u, "CL.THROTTLE", "b:1", "1", "1", "1"); !strings.HasPrefix(got, "-NOPERM ") {
		t.Fatalf("CL.THROTTLE outside the user's keys = %q", got)
	}
	if got, _ := send(t, u, "CL.THROTTLE", "a:1", "1", "1", "1"); got != "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n" {
		t.Fatalf("CL.THROTTLE a:1 = %q", got)
	}
	if got, _ := send(t, admin, "ACL", "LOG"); !strings.Contains(got, "b:1") {
		t.Fatalf("ACL LOG lacks the refusal: %q", got)
	}
	if got, _ := send(t, admin, "ACL", "DELUSER", "u"); got != ":1\r\n" {
		t.Fatalf("ACL DELUSER u = %q", got)
	}
	if got, err := send(t, u, "CL.THROTTLE", "a:1", "1", "1", "1"); !errors.Is(err, commands.ErrLocalClosed) {
		t.Fatalf("after ACL DELUSER: %q, %v; want ErrLocalClosed", got, err)
	}
	if got, _ := send(t, admin, "EXISTS", "a:1"); got != ":1\r\n" {
		t.Fatalf("EXISTS a:1 = %q", got)
	}
}
