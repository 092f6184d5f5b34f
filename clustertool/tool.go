// Package clustertool is `cellserver cluster ...`: the operator's tool to
// create, grow, reshard, rebalance, check and describe a cellserver
// cluster, as redis-cli --cluster is Redis Cluster's.
//
// # Model
//
// cellserver nodes do not gossip: every node holds the topology pushed to
// it (CELLCLUSTER CONFIG), the same on every node. The tool reads the
// current topology from one node (CELLCLUSTER GETCONFIG), computes the
// next one and pushes it to every node it lists. Node ids come from the
// nodes (CELLCLUSTER MYID). Slots move by a declared migration: the
// opening topology lists the migration on the source shard, the source
// streams the keys of those slots to the target (their limits keep their
// state), the tool polls CELLCLUSTER SLOT-MIGRATION-STATUS until the
// source reports FINISHED, then pushes the closing topology, in which the
// target owns them.
//
// Every command writes a human report to Out, or one JSON document when
// JSON is set.
package clustertool

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrCheck is returned when check finds problems (the exit status is 1).
var ErrCheck = errors.New("clustertool: the cluster has problems")

// Tool runs the commands. The zero value is not usable: Dialer and Out
// are needed.
type Tool struct {
	Dialer Dialer
	Out    io.Writer
	// In answers reshard's and rebalance's confirmation (nil: no input,
	// so they need Yes).
	In io.Reader
	// JSON: one JSON document on Out instead of the human report.
	JSON bool
	// Yes: do not ask for confirmation.
	Yes bool
	// MigrationTimeout bounds one migration (from its opening topology to
	// FINISHED). Zero: 10 minutes.
	MigrationTimeout time.Duration
	// Poll is the interval between two SLOT-MIGRATION-STATUS reads. Zero:
	// 100ms.
	Poll time.Duration
}

func (t *Tool) logf(format string, a ...any) {
	if !t.JSON {
		fmt.Fprintf(t.Out, format+"\n", a...)
	}
}

func (t *Tool) emit(v any) error {
	if !t.JSON {
		return nil
	}
	enc := json.NewEncoder(t.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func joinHostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// resolve turns HOST:PORT into the node address a topology holds: an IP
// (a host name is resolved, IPv4 first) and a port.
func resolve(addr string) (Node, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return Node{}, fmt.Errorf("%q: want HOST:PORT: %v", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return Node{}, fmt.Errorf("%q: invalid port", addr)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		ips, err := net.LookupIP(host)
		if err != nil || len(ips) == 0 {
			return Node{}, fmt.Errorf("%q: cannot resolve %s: %v", addr, host, err)
		}
		ip = ips[0]
		for _, x := range ips {
			if x.To4() != nil {
				ip = x
				break
			}
		}
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return Node{IP: ip.String(), Port: port}, nil
}

// myID asks the node its id.
func myID(c *Conn) (string, error) {
	id, err := c.String("CELLCLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("%s: CELLCLUSTER MYID: %w (is it started with --cluster-enabled yes?)", c.Addr, err)
	}
	return id, nil
}

// getConfig reads the node's topology (nil: none installed).
func getConfig(c *Conn) (Topology, error) {
	v, err := c.Do("CELLCLUSTER", "GETCONFIG")
	if err != nil {
		return nil, fmt.Errorf("%s: CELLCLUSTER GETCONFIG: %w", c.Addr, err)
	}
	if v == nil {
		return nil, nil
	}
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("%s: CELLCLUSTER GETCONFIG: unexpected reply %v", c.Addr, v)
	}
	top, err := ParseTopology([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Addr, err)
	}
	return top, nil
}

// readTopology connects to addr and reads its topology, which must exist.
func (t *Tool) readTopology(addr string) (Topology, error) {
	c, err := t.Dialer.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	defer c.Close()
	top, err := getConfig(c)
	if err != nil {
		return nil, err
	}
	if top == nil {
		return nil, fmt.Errorf("%s has no topology (create the cluster first)", addr)
	}
	return top, nil
}

// push sends top to every node it lists, and to extra; every node must
// accept it.
func (t *Tool) push(top Topology, extra ...Node) error {
	js := top.JSON()
	seen := map[string]bool{}
	var errs []string
	for _, n := range append(top.Nodes(), extra...) {
		if seen[n.Addr()] {
			continue
		}
		seen[n.Addr()] = true
		if err := t.pushOne(n.Addr(), js); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("pushing the topology: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (t *Tool) pushOne(addr, js string) error {
	c, err := t.Dialer.Dial(addr)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	defer c.Close()
	if _, err := c.Do("CELLCLUSTER", "CONFIG", js); err != nil {
		return fmt.Errorf("%s: CELLCLUSTER CONFIG: %w", addr, err)
	}
	return nil
}

// confirm asks the question unless Yes; anything but "yes" refuses.
func (t *Tool) confirm(question string) error {
	if t.Yes {
		return nil
	}
	if t.In == nil || t.JSON {
		return errors.New("confirmation needed: pass --yes")
	}
	fmt.Fprintf(t.Out, "%s (type 'yes' to accept): ", question)
	line, _ := bufio.NewReader(t.In).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return errors.New("aborted")
	}
	return nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
