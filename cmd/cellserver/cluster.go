package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/clustertool"
)

const clusterUsage = `Usage: cellserver cluster COMMAND ARGS... [options]

Creates and changes a cluster of cellserver nodes started with
--cluster-enabled yes, as redis-cli --cluster does for Redis Cluster: it
reads the topology from a node (CELLCLUSTER GETCONFIG), computes the next
one and pushes it to every node (CELLCLUSTER CONFIG).

Commands:
  create HOST:PORT... [--replicas N]
        make a cluster of these nodes: ids from the nodes (CELLCLUSTER MYID),
        the first masters with the 16384 slots split evenly, the others N
        replicas per master (REPLICAOF sent to each), then check
  add-node NEW_HOST:PORT EXISTING_HOST:PORT [--replica-of ID]
        add a node: a master without slots (give it slots with reshard or
        rebalance), or a replica of the master ID
  reshard HOST:PORT --from ID --to ID --slots N [--yes] [--timeout D]
        move N slots of master --from to master --to with their keys and
        limits (a declared migration), then give them to --to
  rebalance HOST:PORT [--weight ID=W]... [--threshold P] [--yes] [--timeout D]
        move slots so that masters hold equal shares (or shares in
        proportion to their weights; 0 empties a master), masters without
        slots included; nothing moves when every master is within P percent
        (default 2) of its share
  check HOST:PORT
        every node reachable and holding the same topology and its listed
        id, replicas replicating their master, every slot owned exactly
        once, no migration failed or left open: exit status 1 otherwise,
        with the reasons
  info HOST:PORT
        per master: address, id, slots, keys (DBSIZE), replicas

IDs are node ids (CLUSTER NODES) or unique prefixes of 8 digits or more.

Options:
  --json            one JSON document on stdout instead of the report
  --yes             do not ask for confirmation (reshard, rebalance)
  --timeout D       how long one migration may take before it is
                    cancelled (default 10m; seconds or a duration)
  --user NAME       AUTH with this user (with --pass)
  --pass PASSWORD   AUTH with this password (also -a; default: the
                    REDISCLI_AUTH environment variable, as redis-cli)
  --tls             connect over TLS
  --cacert FILE     verify the nodes with these PEM CAs (default: the
                    system's)
  --cert FILE       present this PEM client certificate (with --key)
  --key FILE        private key of --cert
  --sni NAME        server name to verify (default: the host dialled)
  --insecure        do not verify the nodes' certificates
  --help            print this help

Exit status: 0 done, 1 failed (check: the cluster has problems), 2 usage.
`

// runCluster is `cellserver cluster ...`.
func runCluster(args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o struct {
		json, yes, tls, insecure, help bool
		user, pass, cacert, cert, key  string
		sni, replicaOf, from, to       string
		replicas, slots                int
		threshold                      float64
		timeout                        time.Duration
		weights                        map[string]float64
	}
	o.pass = env("REDISCLI_AUTH")
	o.threshold = 2
	o.slots = -1
	o.weights = map[string]float64{}
	var pos []string
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "cellserver cluster: "+format+"\n(cellserver cluster --help for usage)\n", a...)
		return 2
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		value := func() (string, bool) {
			if hasVal {
				return val, true
			}
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		flag := func(p *bool) {
			*p = true
			if hasVal {
				*p, _ = strconv.ParseBool(val)
			}
		}
		var v string
		var ok bool
		switch name {
		case "json":
			flag(&o.json)
			continue
		case "yes":
			flag(&o.yes)
			continue
		case "tls":
			flag(&o.tls)
			continue
		case "insecure":
			flag(&o.insecure)
			continue
		case "h", "help":
			o.help = true
			continue
		case "user", "pass", "a", "cacert", "cert", "key", "sni", "replicas", "replica-of", "from", "to", "slots", "weight", "threshold", "timeout":
			if v, ok = value(); !ok {
				return bad("--%s needs a value", name)
			}
		default:
			return bad("unknown option %s", a)
		}
		var err error
		switch name {
		case "user":
			o.user = v
		case "pass", "a":
			o.pass = v
		case "cacert":
			o.cacert = v
		case "cert":
			o.cert = v
		case "key":
			o.key = v
		case "sni":
			o.sni = v
		case "replica-of":
			o.replicaOf = v
		case "from":
			o.from = v
		case "to":
			o.to = v
		case "replicas":
			o.replicas, err = strconv.Atoi(v)
		case "slots":
			o.slots, err = strconv.Atoi(v)
		case "threshold":
			o.threshold, err = strconv.ParseFloat(v, 64)
		case "timeout":
			o.timeout, err = parseDuration(v)
		case "weight":
			id, w, found := strings.Cut(v, "=")
			if !found {
				return bad("--weight %s: want ID=WEIGHT", v)
			}
			o.weights[id], err = strconv.ParseFloat(w, 64)
		}
		if err != nil {
			return bad("--%s %s: %v", name, v, err)
		}
	}
	if o.help || len(pos) == 0 {
		w := stdout
		if !o.help {
			w = stderr
		}
		fmt.Fprint(w, clusterUsage)
		if o.help {
			return 0
		}
		return 2
	}
	tool := &clustertool.Tool{
		Dialer:           clustertool.Dialer{User: o.user, Pass: o.pass},
		Out:              stdout,
		In:               stdin,
		JSON:             o.json,
		Yes:              o.yes,
		MigrationTimeout: o.timeout,
	}
	if o.tls || o.cacert != "" || o.cert != "" {
		tc, err := clientTLS(o.cacert, o.cert, o.key, o.sni, o.insecure)
		if err != nil {
			fmt.Fprintf(stderr, "cellserver cluster: %v\n", err)
			return 2
		}
		tool.Dialer.TLS = tc
	}
	cmd, rest := pos[0], pos[1:]
	need := func(n int, what string) bool {
		if len(rest) != n {
			bad("%s takes %s", cmd, what)
			return false
		}
		return true
	}
	var err error
	switch cmd {
	case "create":
		if len(rest) == 0 {
			return bad("create takes HOST:PORT...")
		}
		err = tool.Create(rest, o.replicas)
	case "add-node":
		if !need(2, "NEW_HOST:PORT EXISTING_HOST:PORT") {
			return 2
		}
		err = tool.AddNode(rest[0], rest[1], o.replicaOf)
	case "reshard":
		if !need(1, "HOST:PORT") {
			return 2
		}
		if o.from == "" || o.to == "" || o.slots < 0 {
			return bad("reshard needs --from ID --to ID --slots N")
		}
		err = tool.Reshard(rest[0], o.from, o.to, o.slots)
	case "rebalance":
		if !need(1, "HOST:PORT") {
			return 2
		}
		err = tool.Rebalance(rest[0], o.weights, o.threshold)
	case "check":
		if !need(1, "HOST:PORT") {
			return 2
		}
		err = tool.Check(rest[0])
	case "info":
		if !need(1, "HOST:PORT") {
			return 2
		}
		err = tool.Info(rest[0])
	default:
		return bad("unknown command %q", cmd)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, clustertool.ErrCheck):
		return 1
	}
	if o.json {
		fmt.Fprintf(stdout, "{\"error\": %q}\n", err.Error())
	}
	fmt.Fprintf(stderr, "cellserver cluster %s: %v\n", cmd, err)
	return 1
}

// clientTLS is the TLS configuration of --tls, --cacert, --cert, --key,
// --sni and --insecure (redis-cli's names).
func clientTLS(cacert, cert, key, sni string, insecure bool) (*tls.Config, error) {
	tc := &tls.Config{ServerName: sni, InsecureSkipVerify: insecure, MinVersion: tls.VersionTLS12}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate", cacert)
		}
		tc.RootCAs = pool
	}
	if cert != "" || key != "" {
		if cert == "" || key == "" {
			return nil, errors.New("--cert and --key go together")
		}
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}
