package harness

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// Place is where a process of a test runs: the address it listens on
// (and others reach it at) and the command prefix that runs a program
// there. Loopback is the test's own network namespace; a Net's hosts are
// namespaces of their own.
type Place struct {
	IP   string
	Exec []string // prepended to a program's argv; nil: run it directly
}

// Loopback is 127.0.0.1 in the test process's network namespace.
var Loopback = Place{IP: "127.0.0.1"}

// Addr is ip:port at p.
func (p Place) Addr(port int) string { return net.JoinHostPort(p.IP, strconv.Itoa(port)) }

// Argv is argv run at p.
func (p Place) Argv(argv ...string) []string {
	return append(append([]string(nil), p.Exec...), argv...)
}

// StartAt is Start with argv run at p.
func StartAt(t testing.TB, p Place, name string, env []string, argv ...string) *Proc {
	t.Helper()
	return Start(t, name, env, p.Argv(argv...)...)
}

// Net is a private IPv4 /24 of hosts, each a network namespace the test
// created, joined by veth pairs to a bridge in a namespace of its own (the
// hub); the test process's namespace is joined to the bridge too (at .1),
// so the test reaches every host directly and no host reaches anything
// outside the Net. Namespace names are unique per test process and Net
// (they carry the PID); everything is removed when the test ends, failed
// or not: the processes running in the namespaces are killed (SIGKILL),
// the namespaces deleted, which deletes their interfaces.
//
// Cut and Heal partition hosts with policy routing rules (`ip rule ...
// blackhole`), since tc and iptables are not always available: a cut
// adds a rule on each side, so traffic stops both ways, and established
// TCP connections hang as on a real network partition (nothing is reset).
type Net struct {
	t      testing.TB
	prefix string // of every name the Net creates
	subnet string // "10.a.b."
	hub    string // the bridge's namespace
	link   string // the veth end in the test's namespace
	hosts  []*Host

	mu   sync.Mutex // guards cuts
	cuts map[[2]string]bool
}

// Host is one namespace of a Net.
type Host struct {
	Name string // as NewNet was given it
	NS   string // the namespace's name
	IP   string
}

// Place runs programs in h's namespace (ip netns exec, which execs the
// program: its PID is the program's).
func (h *Host) Place() Place { return Place{IP: h.IP, Exec: []string{"ip", "netns", "exec", h.NS}} }

var netSeq atomic.Int64

// NeedNetns skips t unless the test runs as root with ip(8) and can
// create a network namespace.
func NeedNetns(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("creates network namespaces and starts processes")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (creates network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) not installed")
	}
	ns := fmt.Sprintf("cs%d-probe%d", os.Getpid(), netSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace (ip netns add: %v: %s)", err, bytes.TrimSpace(out))
	}
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v: %s", ns, err, out)
	}
}

// NewNet creates a Net with one host per name, at .10, .11, ... in the
// order given. It first removes what test processes killed before their
// cleanups ran (a go test timeout) left (sweepStale).
func NewNet(t testing.TB, names ...string) *Net {
	t.Helper()
	sweepStale.Do(sweepStaleNets)
	seq := netSeq.Add(1)
	n := &Net{t: t, prefix: fmt.Sprintf("cs%d-%d", os.Getpid(), seq), cuts: map[[2]string]bool{}}
	n.link = fmt.Sprintf("cs%dn%d", os.Getpid()%1000000, seq%100)
	n.subnet = freeSubnet(t, os.Getpid()+int(seq))
	n.hub = n.prefix + "-hub"
	var made []string // namespaces created, for the cleanup
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			killNamespace(made[i])
			if out, err := exec.Command("ip", "netns", "del", made[i]).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", made[i], err, out)
			}
		}
		// The hub's deletion took the veth pair with it; this only
		// matters when it was never moved there.
		_ = exec.Command("ip", "link", "del", n.link).Run()
	})
	n.ip(nil, "netns", "add", n.hub)
	made = append(made, n.hub)
	n.ip(&n.hub, "link", "set", "lo", "up")
	n.ip(&n.hub, "link", "add", "br0", "type", "bridge")
	n.ip(&n.hub, "link", "set", "br0", "up")
	n.ip(nil, "link", "add", n.link, "type", "veth", "peer", "name", "root", "netns", n.hub)
	n.ip(nil, "addr", "add", n.subnet+"1/24", "dev", n.link)
	n.ip(nil, "link", "set", n.link, "up")
	n.ip(&n.hub, "link", "set", "root", "master", "br0", "up")
	for i, name := range names {
		h := &Host{Name: name, NS: n.prefix + "-" + name, IP: n.subnet + strconv.Itoa(10+i)}
		n.ip(nil, "netns", "add", h.NS)
		made = append(made, h.NS)
		port := "h" + strconv.Itoa(i)
		n.ip(&h.NS, "link", "set", "lo", "up")
		n.ip(&n.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
		n.ip(&h.NS, "addr", "add", h.IP+"/24", "dev", "eth0")
		n.ip(&h.NS, "link", "set", "eth0", "up")
		n.ip(&n.hub, "link", "set", port, "master", "br0", "up")
		n.hosts = append(n.hosts, h)
	}
	return n
}

// freeSubnet picks a 10.x.y.0/24 that overlaps no address or route of
// the test's namespace, starting from a place that seed (the PID)
// spreads.
func freeSubnet(t testing.TB, seed int) string {
	t.Helper()
	var used []netip.Prefix
	for _, args := range [][]string{{"-4", "-o", "route", "show", "table", "all"}, {"-4", "-o", "addr", "show"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		for _, f := range strings.Fields(string(out)) {
			if p, err := netip.ParsePrefix(f); err == nil && p.Bits() > 0 {
				used = append(used, p)
			} else if a, err := netip.ParseAddr(f); err == nil {
				used = append(used, netip.PrefixFrom(a, a.BitLen()))
			}
		}
	}
next:
	for i := range 2000 {
		k := (seed + i) % 2000
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + k/250), byte(k % 250), 0}), 24)
		for _, p := range used {
			if p.Overlaps(cand) {
				continue next
			}
		}
		return fmt.Sprintf("10.%d.%d.", 200+k/250, k%250)
	}
	t.Fatal("no free 10.x.y.0/24 for a test network")
	return ""
}

var sweepStale sync.Once

// staleName matches the namespaces a Net creates: cs<pid>-<seq>-<host>.
var staleName = regexp.MustCompile(`^cs(\d+)-\d+-`)

// sweepStaleNets deletes the namespaces of Nets whose test process is
// gone, after killing the processes left running in them.
func sweepStaleNets() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := staleName.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		killNamespace(f[0])
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// killNamespace SIGKILLs every process running in namespace ns (the
// processes a test started there).
func killNamespace(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// ip runs ip(8) with args, in namespace *ns if ns is not nil, failing
// the test on an error.
func (n *Net) ip(ns *string, args ...string) {
	n.t.Helper()
	if ns != nil {
		args = append([]string{"-n", *ns}, args...)
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// Host returns the host named name.
func (n *Net) Host(name string) *Host {
	for _, h := range n.hosts {
		if h.Name == name {
			return h
		}
	}
	n.t.Fatalf("no host %q in the test network", name)
	return nil
}

// Hosts lists the hosts in the order NewNet was given them.
func (n *Net) Hosts() []*Host { return append([]*Host(nil), n.hosts...) }

// cutPref is the priority of the blackhole rules, before the main table
// (32766).
const cutPref = "1000"

// Cut stops all traffic between a and each of others, both ways: a rule
// in a's namespace blackholes the other's address and one in the other's
// blackholes a's. Cutting hosts already cut is an error.
func (n *Net) Cut(a *Host, others ...*Host) {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, b := range others {
		for _, p := range [][2]*Host{{a, b}, {b, a}} {
			n.ip(&p[0].NS, "rule", "add", "to", p[1].IP+"/32", "blackhole", "pref", cutPref)
			n.cuts[[2]string{p[0].NS, p[1].IP}] = true
		}
	}
}

// Heal removes the rules Cut(a, others...) added.
func (n *Net) Heal(a *Host, others ...*Host) {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, b := range others {
		for _, p := range [][2]*Host{{a, b}, {b, a}} {
			k := [2]string{p[0].NS, p[1].IP}
			if !n.cuts[k] {
				n.t.Fatalf("heal %s-%s: not cut", p[0].Name, p[1].Name)
			}
			n.ip(&p[0].NS, "rule", "del", "to", p[1].IP+"/32", "blackhole", "pref", cutPref)
			delete(n.cuts, k)
		}
	}
}
