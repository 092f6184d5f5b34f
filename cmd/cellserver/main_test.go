package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

func TestHelpListsEveryOptionWithDefault(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d, stderr %q", code, errb.String())
	}
	help := out.String()
	for _, o := range options {
		def := o.def
		if def == "" {
			def = `""`
		}
		for _, want := range []string{"--" + o.name + " ", "(default " + def + ")", envName(o.name)} {
			if !strings.Contains(help, want) {
				t.Errorf("--help lacks %q for option %s", want, o.name)
			}
		}
	}
	for _, want := range []string{"--config", "--version", "Precedence: command line > environment > config file > default"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	// An option declared twice makes the flag set panic ("flag redefined")
	// when --help builds it above, so this test fails on it.
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--version"}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := out.String(); got != "cellserver "+version+"\n" {
		t.Fatalf("got %q", got)
	}
}

func envFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestPrecedence: flag > environment > config file > default, per option.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cellserver.conf")
	conf := "# comment\n\naddr 127.0.0.1:7000\nmaxclients 300\ntimeout 30\nrequirepass \"from file\"\nlog-level warn\n" +
		"user alice on >pw ~a:* +@rate_limit\nuser bob off\nacllog-max-len 7\n" +
		"metrics-user ops\nmetrics-password \"metrics pw\"\n"
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	env := envFrom(map[string]string{
		"CELLSERVER_CONFIG":     file,
		"CELLSERVER_MAXCLIENTS": "200",
		"CELLSERVER_TIMEOUT":    "1m",
	})
	cfg, code, done, _ := loadConfig([]string{"--maxclients", "100"}, env, io.Discard, io.Discard)
	if done {
		t.Fatalf("loadConfig stopped with code %d", code)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"maxclients: flag beats env and file", cfg.MaxClients, 100},
		{"timeout: env beats file", cfg.IdleTimeout, time.Minute},
		{"addr: file beats default", cfg.Addr, "127.0.0.1:7000"},
		{"requirepass: quoted file value", cfg.Password, "from file"},
		{"log-level: file", cfg.LogLevel, "warn"},
		{"user: every line, in order", strings.Join(cfg.Users, "|"), "alice on >pw ~a:* +@rate_limit|bob off"},
		{"acllog-max-len: file", cfg.ACLLogMaxLen, 7},
		{"metrics-user: file", cfg.MetricsUser, "ops"},
		{"metrics-password: quoted file value", cfg.MetricsPassword, "metrics pw"},
		{"aclfile: default", cfg.ACLFile, ""},
		{"config file: for INFO config_file", cfg.ConfigFile, file},
		{"databases: default", cfg.Databases, 16},
		{"proto-max-bulk-len: default with unit", cfg.MaxBulkLen, int64(16 << 20)},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	// --config on the command line beats CELLSERVER_CONFIG.
	other := filepath.Join(dir, "other.conf")
	os.WriteFile(other, []byte("databases 4\n"), 0o600)
	cfg, _, done, _ = loadConfig([]string{"--config", other}, env, io.Discard, io.Discard)
	if done || cfg.Databases != 4 || cfg.Addr != server.DefaultAddr {
		t.Errorf("--config %s: databases %d addr %s", other, cfg.Databases, cfg.Addr)
	}
}

// TestInvalidConfigReportsEveryProblem: all problems, from every source,
// in one report, and a non-zero exit.
func TestInvalidConfigReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.conf")
	os.WriteFile(file, []byte("no-such-option 1\nshards many\n"), 0o600)
	env := envFrom(map[string]string{"CELLSERVER_LOG_FORMAT": "xml", "CELLSERVER_TIMEOUT": "soon"})
	var errb bytes.Buffer
	_, code, done, _ := loadConfig([]string{"--config", file, "--addr", "nonsense", "--maxclients", "-1", "--databases", "-3", "--proto-max-bulk-len", "lots"}, env, io.Discard, &errb)
	if !done || code == 0 {
		t.Fatalf("invalid configuration accepted (code %d)", code)
	}
	report := errb.String()
	for _, want := range []string{
		`unknown option "no-such-option"`, "shards (from config file", "log-format", "timeout (from environment CELLSERVER_TIMEOUT)",
		"addr", "MaxClients", "databases", "proto-max-bulk-len (from flag --proto-max-bulk-len)",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if code := run([]string{"--no-such-flag"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
	if code := run([]string{"extra"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("stray argument: exit %d, want 2", code)
	}
	if code := run([]string{"--config", filepath.Join(dir, "missing.conf")}, io.Discard, io.Discard); code != 2 {
		t.Errorf("missing config file: exit %d, want 2", code)
	}
	// A node id is 40 lower-case hex digits, as Redis's: a 41-digit one
	// (which would leave the node out of the topology naming its first 40,
	// a stray master without slots) is refused at start.
	errb.Reset()
	id41 := "0123456789abcdef0123456789abcdef012345678"
	if code := run([]string{"--cluster-enabled", "yes", "--cluster-node-id", id41}, io.Discard, &errb); code != 2 ||
		!strings.Contains(errb.String(), `cluster-node-id "`+id41+`": node id must be 40 lower-case hex digits (as Redis's), not 41 bytes`) {
		t.Errorf("--cluster-node-id of 41 digits: exit %d, want 2 with the reason; stderr %q", code, errb.String())
	}
}

// TestMain removes the binary binproc.Binary builds, once per test run,
// for the tests that run it.
func TestMain(m *testing.M) { binproc.Main(m) }

var addrRE = regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)

// startBinary runs the real binary on a free loopback port and returns the
// process, its address and a channel carrying its exit error.
func startBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, string, <-chan error, *bytes.Buffer) {
	t.Helper()
	return startBinaryWith(t, bin, func(line []byte) (string, bool) {
		if m := addrRE.FindSubmatch(line); m != nil {
			return string(m[1]), true
		}
		return "", false
	}, args...)
}

// startBinaryWith starts bin on 127.0.0.1:0 with args and finds its address
// in its log with addrOf.
func startBinaryWith(t *testing.T, bin string, addrOf func(line []byte) (string, bool), args ...string) (*exec.Cmd, string, <-chan error, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	addrc := make(chan string, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if a, ok := addrOf(sc.Bytes()); ok && !sent {
				addrc <- a
				sent = true
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case addr := <-addrc:
		return cmd, addr, exited, &logs
	case err := <-exited:
		t.Fatalf("server exited before listening: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("server did not report its address")
	}
	return nil, "", nil, nil
}

// TestGracefulShutdownOfRealBinary: with clients connected (one idle, one
// in the middle of a pipeline), SIGTERM lets the pipeline's replies arrive,
// closes every connection and exits 0.
func TestGracefulShutdownOfRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := binproc.Binary(t)
	cmd, addr, exited, logs := startBinary(t, bin)

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	const n = 5000
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, n)
	for i := range cmds {
		cmds[i] = pipe.Do(ctx, "CL.THROTTLE", "user:shutdown", 10, 1, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline before shutdown: %v", err)
	}
	allowed := 0
	for _, c := range cmds {
		v, err := c.Slice()
		if err != nil || len(v) != 5 {
			t.Fatalf("reply %v, %v", v, err)
		}
		if v[0].(int64) == 0 {
			allowed++
		}
	}
	if allowed != 11 {
		t.Fatalf("allowed %d of a burst of 11", allowed)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("server did not stop within 15s\n%s", logs.String())
	}
	// The idle client sees its connection closed.
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("idle connection still open after shutdown")
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("idle connection not closed by shutdown")
	}
	if !strings.Contains(logs.String(), "stopped") {
		t.Errorf("no 'stopped' log line:\n%s", logs.String())
	}
}

// TestStartupLogLine: one line at startup with version, address,
// persistence mode and limits.
func TestStartupLogLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := binproc.Binary(t)
	_, addr, _, logs := startBinary(t, bin, "--maxclients", "77")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	line := strings.SplitN(logs.String(), "\n", 2)[0]
	for _, want := range []string{"cellserver started", "version=", "addr=" + addr, "persistence=none", "maxclients=77"} {
		if !strings.Contains(line, want) {
			t.Errorf("startup line lacks %q: %s", want, line)
		}
	}
}

// TestHealthcheck: --healthcheck against a running binary (with a password)
// exits 0, and 1 when nothing listens.
func TestHealthcheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := binproc.Binary(t)
	_, addr, _, _ := startBinary(t, bin, "--requirepass", "pw")
	var out, errb bytes.Buffer
	if code := run([]string{"--healthcheck", "--addr", addr, "--requirepass", "pw"}, &out, &errb); code != 0 {
		t.Fatalf("healthcheck exit %d: %s", code, errb.String())
	}
	if code := run([]string{"--healthcheck", "--addr", addr, "--requirepass", "wrong"}, io.Discard, io.Discard); code != 1 {
		t.Fatalf("healthcheck with a wrong password: exit %d, want 1", code)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	free := ln.Addr().String()
	ln.Close()
	if code := run([]string{"--healthcheck", "--addr", free}, io.Discard, io.Discard); code != 1 {
		t.Fatalf("healthcheck of nothing: exit %d, want 1", code)
	}
}

// TestJSONLogs: --log-format json writes one JSON object per line,
// startup line included; debug lines appear only at --log-level debug.
func TestJSONLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := binproc.Binary(t)
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "warn", "--version")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "cellserver ") {
		t.Fatalf("--version with log flags: %q %v", out, err)
	}
	_, addr, _, logs := startBinaryJSON(t, bin)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rdb.Ping(context.Background())
	first := strings.SplitN(logs.String(), "\n", 2)[0]
	var rec map[string]any
	if err := json.Unmarshal([]byte(first), &rec); err != nil {
		t.Fatalf("startup line is not JSON: %q: %v", first, err)
	}
	if rec["msg"] != "cellserver started" || rec["addr"] != addr || rec["level"] != "INFO" {
		t.Fatalf("startup record %v", rec)
	}
}

// startBinaryJSON starts the binary with JSON logs and finds its address
// in the "addr" field of the startup record.
func startBinaryJSON(t *testing.T, bin string) (*exec.Cmd, string, <-chan error, *bytes.Buffer) {
	t.Helper()
	return startBinaryWith(t, bin, func(line []byte) (string, bool) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil {
			return "", false
		}
		a, ok := rec["addr"].(string)
		return a, ok
	}, "--log-format", "json")
}

// TestLoadDamagedWALOption: --load-damaged-wal is off by default and set by
// the flag, the environment or the config file; other values are refused.
func TestLoadDamagedWALOption(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cellserver.conf")
	if err := os.WriteFile(file, []byte("load-damaged-wal yes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", nil, nil, false},
		{"flag", []string{"--load-damaged-wal", "yes"}, nil, true},
		{"env", nil, map[string]string{"CELLSERVER_LOAD_DAMAGED_WAL": "yes"}, true},
		{"file", []string{"--config", file}, nil, true},
		{"flag beats file", []string{"--config", file, "--load-damaged-wal", "no"}, nil, false},
	} {
		cfg, code, done, _ := loadConfig(c.args, envFrom(c.env), io.Discard, io.Discard)
		if done || cfg.LoadDamagedWAL != c.want {
			t.Errorf("%s: LoadDamagedWAL %v (stopped %v, code %d), want %v", c.name, cfg.LoadDamagedWAL, done, code, c.want)
		}
	}
	var stderr strings.Builder
	if _, code, done, _ := loadConfig([]string{"--load-damaged-wal", "maybe"}, envFrom(nil), io.Discard, &stderr); !done || code == 0 || !strings.Contains(stderr.String(), "load-damaged-wal") {
		t.Errorf("--load-damaged-wal maybe: code %d, stderr %q", code, stderr.String())
	}
}
