package server_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// rawSession sends each command inline and checks the exact reply line.
func rawSession(t *testing.T, addr string, steps [][2]string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	for _, st := range steps {
		if _, err := c.Write([]byte(st[0] + "\r\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", st[0], err)
		}
		got := strings.TrimSuffix(line, "\r\n")
		if !strings.HasPrefix(got, st[1]) {
			t.Fatalf("%s: got %q, want prefix %q", st[0], got, st[1])
		}
		if strings.HasPrefix(got, "*") || strings.HasPrefix(got, "$") {
			return // an aggregate reply ends the session; its body is checked elsewhere
		}
	}
}

func TestAuthRequired(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{Password: "s3cret"})
	rawSession(t, addr, [][2]string{
		{"PING", "-NOAUTH Authentication required."},
		{"CL.THROTTLE k 1 1 1", "-NOAUTH Authentication required."},
		{"GET k", "-NOAUTH Authentication required."},
		{"CONFIG GET requirepass", "-NOAUTH Authentication required."},
		{"AUTH wrong", "-WRONGPASS invalid username-password pair or user is disabled."},
		{"AUTH nobody s3cret", "-WRONGPASS invalid username-password pair or user is disabled."},
		{"HELLO 2", "-NOAUTH HELLO must be called with the client already authenticated"},
		{"AUTH s3cret", "+OK"},
		{"PING", "+PONG"},
		{"RESET", "+RESET"},
		{"PING", "-NOAUTH Authentication required."},
		{"AUTH default s3cret", "+OK"},
		{"CONFIG GET requirepass", "*2"},
	})
	rawSession(t, addr, [][2]string{
		{"HELLO 2 AUTH default wrong", "-WRONGPASS invalid username-password pair or user is disabled."},
		{"HELLO 2 AUTH default s3cret", "*14"},
	})
	rawSession(t, addr, [][2]string{{"QUIT", "+OK"}})
}

func TestAuthWithoutPassword(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	rawSession(t, addr, [][2]string{
		{"PING", "+PONG"},
		{"AUTH x", "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"},
		{"AUTH default x", "+OK"},
	})
}

func TestConfigGetMasksPassword(t *testing.T) {
	cfg := server.Config{Password: "s3cret"}
	for _, st := range cfg.Settings() {
		if st.Name == "requirepass" && st.Value == "s3cret" {
			t.Fatal("CONFIG GET shows the password")
		}
		if strings.Contains(st.Value, "s3cret") {
			t.Fatalf("setting %s leaks the password", st.Name)
		}
	}
}
