package commands

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// newRunID returns Redis's run_id: 40 random hex characters, drawn once
// per process (Redis's getRandomHexChars at startup).
func newRunID() string {
	var b [20]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// absPath is p made absolute, as Redis shows config_file; "" stays "".
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// RunID returns the server's run_id: 40 hex characters, random for each
// process and stable for its life. INFO server reports it.
func (s *Server) RunID() string { return s.runID }

// bytesToHuman is Redis's bytesToHuman (used_memory_human and friends):
// "123B" under 1 KiB, then two decimals and K, M, G, T, P or E.
func bytesToHuman(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + "B"
	}
	d := float64(n)
	for _, unit := range []string{"K", "M", "G", "T", "P"} {
		d /= 1024
		if d < 1024 {
			return fmt.Sprintf("%.2f%s", d, unit)
		}
	}
	return fmt.Sprintf("%.2fE", d/1024)
}

// ratio is a/b, or 0 when b is 0, for the *_ratio fields (Redis prints
// them with two decimals).
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// instSamples is how many samples the instantaneous_* figures average,
// taken every Config.SweepInterval (Redis: STATS_METRIC_SAMPLES, 16, every
// 100 ms).
const instSamples = 16

// instMetric is one of Redis's instantaneous metrics: a rate per second
// averaged over the last instSamples samples.
type instMetric struct {
	lastT   time.Duration // monotonic, 0 before the first sample
	lastV   int64
	samples [instSamples]float64
	idx     int
}

func (m *instMetric) add(now time.Duration, v int64) {
	if m.lastT != 0 && now > m.lastT {
		m.samples[m.idx] = float64(v-m.lastV) / (now - m.lastT).Seconds()
		m.idx = (m.idx + 1) % instSamples
	}
	m.lastT, m.lastV = now, v
}

func (m *instMetric) rate() float64 {
	var sum float64
	for _, s := range m.samples {
		sum += s
	}
	return sum / instSamples
}

// instStats are the instantaneous_* figures of INFO stats, sampled by Run.
type instStats struct {
	mu            sync.Mutex // guards the metrics
	ops, in, out  instMetric
	peakMemory    atomic.Int64 // used_memory_peak
	startupMemory int64        // used_memory_startup
}

// sample takes one sample of the instantaneous metrics and of the peak
// memory. It runs every sweep interval.
func (s *Server) sample() {
	now := time.Since(s.monoBase)
	var in, out int64
	if n := s.net.Load(); n != nil {
		st := n.Stats()
		in, out = st.NetInputBytes, st.NetOutputBytes
	}
	s.inst.mu.Lock()
	s.inst.ops.add(now, s.cmdsTotal.Load())
	s.inst.in.add(now, in)
	s.inst.out.add(now, out)
	s.inst.mu.Unlock()
	s.notePeak(heapObjects())
}

// notePeak raises used_memory_peak to used if it is higher.
func (s *Server) notePeak(used int64) {
	for {
		p := s.inst.peakMemory.Load()
		if used <= p || s.inst.peakMemory.CompareAndSwap(p, used) {
			return
		}
	}
}

// heapObjects is the Go heap's allocated bytes (runtime.MemStats.HeapAlloc)
// read without stopping the world.
func heapObjects() int64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(sample[0].Value.Uint64())
}

// processRSS returns the resident set size of this process in bytes, from
// /proc/self/statm, or fallback where there is no /proc.
func processRSS(fallback int64) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return fallback
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return fallback
	}
	return pages * int64(os.Getpagesize())
}

// totalSystemMemory returns the machine's memory in bytes, from
// /proc/meminfo, or 0 where it is unknown (as Redis reports).
var totalSystemMemory = sync.OnceValue(func() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("MemTotal:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
})

// osName is Redis's os field, "Linux 6.1.0-18-amd64 x86_64" (uname's
// sysname, release and machine), from /proc where there is one.
var osName = sync.OnceValue(func() string {
	sys := runtime.GOOS
	if b, err := os.ReadFile("/proc/sys/kernel/ostype"); err == nil {
		sys = strings.TrimSpace(string(b))
	}
	parts := []string{sys}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, strings.TrimSpace(string(b)))
	}
	machine := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686"}[runtime.GOARCH]
	if machine == "" {
		machine = runtime.GOARCH
	}
	return strings.Join(append(parts, machine), " ")
})

// multiplexingAPI is Redis's multiplexing_api: what the Go runtime's
// network poller (and cellserver's event loops, on Linux) wait with.
func multiplexingAPI() string {
	switch runtime.GOOS {
	case "linux", "android":
		return "epoll"
	case "darwin", "ios", "freebsd", "netbsd", "openbsd", "dragonfly":
		return "kqueue"
	case "windows":
		return "iocp"
	case "solaris", "illumos":
		return "evport"
	}
	return "poll"
}

// buildID is Redis's redis_build_id: hex characters that differ between
// builds; here a digest of cellserver's version and Go's.
func buildID(version string) string {
	var h uint64 = 14695981039346656037 // FNV-1a
	for _, c := range []byte(version + " " + runtime.Version()) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 16)
}

// lruClock is Redis's lru_clock: seconds modulo 2^24.
func lruClock(now time.Time) int64 { return now.Unix() & (1<<24 - 1) }

// cpuSeconds formats a CPU time as Redis does ("%ld.%06ld").
func cpuSeconds(d time.Duration) string {
	us := d.Microseconds()
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}
