package compat

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/testwait"
)

// What monitoring tools send: redis-cli --bigkeys, --memkeys and --stat,
// and the Prometheus redis exporter (Debian prometheus-redis-exporter),
// each against a server holding string keys and every kind of limiter key.

// toolKeys fills the server at addr with string keys and limiter keys and
// returns the bytes GET shows for each string key (a CL.THROTTLE key is a
// string: its TAT in ns).
func toolKeys(t *testing.T, addr string) map[string]string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	for _, cmd := range [][]any{
		{"SET", "s", "hello"},
		{"SET", "t", "hello world"},
		{"SET", "n", "42"},
		{"CL.THROTTLE", "gcra", "10", "10", "60"},
		{"CL.FIXED", "fixed", "10", "60s"},
		{"CL.SLIDING", "sliding", "10", "60s"},
		{"CL.SLIDINGLOG", "log", "10", "60s"},
		{"CL.ACQUIRE", "leases", "3", "60s", "token"},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	strs := map[string]string{}
	for _, k := range []string{"s", "t", "n", "gcra"} {
		v, err := rdb.Get(ctx, k).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		strs[k] = v
	}
	return strs
}

func redisCLI(t *testing.T) (string, []string) {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed")
	}
	// No ~/.redisclirc, no history file of the user's.
	return cli, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
}

// TestRedisCLIBigKeysMemKeys: redis-cli --bigkeys and --memkeys scan every
// key without a warning (before STRLEN existed, --bigkeys warned "STRLEN on
// 'k' failed" for every string key), and --bigkeys sums the string lengths
// GET shows.
func TestRedisCLIBigKeysMemKeys(t *testing.T) {
	cli, env := redisCLI(t)
	_, addr := startServer(t)
	strs := toolKeys(t, addr)
	host, port, _ := net.SplitHostPort(addr)
	total := 0
	for _, v := range strs {
		total += len(v)
	}
	for _, mode := range []string{"--bigkeys", "--memkeys"} {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		cmd := exec.CommandContext(ctx, cli, "-h", host, "-p", port, mode)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("redis-cli %s: %v\n%s", mode, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			l := strings.ToLower(line)
			if strings.Contains(l, "warning") || strings.Contains(l, "err") || strings.Contains(l, "fail") {
				t.Errorf("redis-cli %s: %q", mode, line)
			}
		}
		if !strings.Contains(string(out), "Sampled 8 keys in the keyspace!") {
			t.Errorf("redis-cli %s: no \"Sampled 8 keys\" line:\n%s", mode, out)
		}
		if mode == "--bigkeys" {
			want := fmt.Sprintf("%d strings with %d bytes", len(strs), total)
			if !strings.Contains(string(out), want) {
				t.Errorf("redis-cli --bigkeys: no %q line:\n%s", want, out)
			}
		}
		t.Logf("redis-cli %s: %d lines, no warning", mode, strings.Count(string(out), "\n"))
	}
}

// TestRedisCLIStat: redis-cli --stat prints its table (keys, memory,
// clients, requests, connections) from INFO and no error. It runs until
// killed; stdbuf makes its stdout line-buffered so that the lines can be
// read as they come.
func TestRedisCLIStat(t *testing.T) {
	cli, env := redisCLI(t)
	stdbuf, err := exec.LookPath("stdbuf")
	if err != nil {
		t.Skip("stdbuf not installed")
	}
	_, addr := startServer(t)
	toolKeys(t, addr)
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, stdbuf, "-oL", cli, "-h", host, "-p", port, "--stat", "-i", "0.1")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	var lines []string
	for len(lines) < 5 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 5 {
		cancel()
		_ = cmd.Wait()
		t.Fatalf("redis-cli --stat: %q (%v) %s", lines, sc.Err(), stderr.String())
	}
	// keys mem clients blocked requests connections: 8 keys, 1 client.
	row := regexp.MustCompile(`^8 +[0-9.]+[BKMG] +1 +0 +[0-9]+ \(\+[0-9]+\) +[0-9]+ *$`)
	for i, l := range lines {
		if i >= 2 && !row.MatchString(l) {
			t.Errorf("redis-cli --stat line %d: %q", i, l)
		}
	}
	t.Logf("redis-cli --stat: %q", lines)
}

// TestPrometheusRedisExporter scrapes cellserver once through the Debian
// Prometheus redis exporter (scripts/ensure-tools.sh installs it) and
// requires a log without error or warning lines (before LATENCY existed, it
// logged "ERR unknown command 'LATENCY'"), redis_up 1, no scrape error,
// and the sizes of the string keys it is asked to check (STRLEN).
func TestPrometheusRedisExporter(t *testing.T) {
	bin, err := exec.LookPath("prometheus-redis-exporter")
	if err != nil {
		t.Skip("prometheus-redis-exporter not installed (scripts/ensure-tools.sh installs it)")
	}
	_, addr := startServer(t)
	strs := toolKeys(t, addr)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := ln.Addr().String()
	ln.Close() // the exporter takes the port; another process could race for it, rarely
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	var logBuf bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-redis.addr", "redis://"+addr, "-web.listen-address", web,
		"-ping-on-connect", "-include-system-metrics", "-check-single-keys", "db0=s,db0=t,db0=n,db0=gcra,db0=nokey")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	defer stop()

	// Wait (bounded) for the exporter's web server, then scrape once.
	var body []byte
	ok, last := testwait.Poll(ioTimeout, func() (bool, string) {
		resp, err := http.Get("http://" + web + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
		}
		return true, ""
	})
	if !ok {
		t.Fatalf("exporter did not serve /metrics: %s\n%s", last, logBuf.String())
	}
	stop()
	metrics := string(body)
	for _, want := range []string{"redis_up 1", `redis_exporter_last_scrape_error{err=""} 0`} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics: no %q line", want)
		}
	}
	for k, v := range strs {
		want := `redis_key_size{db="db0",key="` + k + `"} ` + strconv.Itoa(len(v))
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics: no %q line", want)
		}
	}
	log := logBuf.String()
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if !strings.Contains(line, "level=info") {
			t.Errorf("exporter log: %s", line)
		}
	}
	t.Logf("exporter: %d metric lines, %d log lines", strings.Count(metrics, "\n"), strings.Count(log, "\n"))
}
