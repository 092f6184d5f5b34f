// Package clusterha runs the per-shard Sentinel recipe of the README
// ("Cluster", failover per shard) with real processes on 127.0.0.1: two
// shards of cellserver nodes in cluster mode, each a primary and a
// replica (REPLICAOF), three redis-sentinel processes (Debian
// redis-sentinel 7.0.15) monitoring shard-0 and shard-1 with
// scripts/cluster-reconfig.sh as client-reconfig-script, and a go-redis
// ClusterClient load. It also checks the script alone against fake nodes
// (script_test.go), which needs only redis-cli.
package clusterha

import (
	"testing"

	"github.com/cellserver/cellserver/internal/binproc"
)

// CELLSERVER_BIN: test this binary instead of building one (binproc.Path).
func TestMain(m *testing.M) { binproc.Main(m) }
