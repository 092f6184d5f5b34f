// Package topotest builds cluster topologies (CELLCLUSTER CONFIG's JSON)
// and node ids for tests.
package topotest

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/cellserver/cellserver/keyslot"
)

// ID returns a valid node id (40 lower-case hex digits, as Redis's) named
// after name: name's bytes in hex, left-padded with zeros, so that
// ID("m1") is "0000…6d31" and a failure message still says which node it
// is (hex.DecodeString of the id, zeros trimmed, gives name back). Two
// names give two ids. name must be at most 20 bytes.
func ID(name string) string {
	if len(name) > 20 {
		panic(fmt.Sprintf("topotest.ID(%q): more than 20 bytes", name))
	}
	h := hex.EncodeToString([]byte(name))
	return strings.Repeat("0", 40-len(h)) + h
}

// Name returns the name ID was given for id, or id itself if it is not
// one ID made.
func Name(id string) string {
	b, err := hex.DecodeString(strings.TrimLeft(id, "0"))
	if err != nil || len(id) != 40 {
		return id
	}
	return string(b)
}

// Wide returns a topology of shards shards of one master and replicas
// replicas each, the 16384 slots dealt to them one at a time in turn
// (every range is one slot, so CLUSTER SLOTS lists a shard's nodes once
// per slot), every node at ip, ports from 10000 (five digits, as most
// are), node ids the port in 40 decimal digits (WideID).
func Wide(shards, replicas int, ip string) string {
	var b strings.Builder
	port := 10000
	node := func() {
		fmt.Fprintf(&b, `{"id":%q,"ip":%q,"port":%d}`, WideID(port), ip, port)
		port++
	}
	b.WriteByte('[')
	for s := range shards {
		if s > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"slot_ranges":[`)
		for slot := s; slot < keyslot.Slots; slot += shards {
			if slot > s {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"start":%d,"end":%d}`, slot, slot)
		}
		b.WriteString(`],"master":`)
		node()
		b.WriteString(`,"replicas":[`)
		for r := range replicas {
			if r > 0 {
				b.WriteByte(',')
			}
			node()
		}
		b.WriteString(`]}`)
	}
	b.WriteByte(']')
	return b.String()
}

// WideID is the id Wide gives the node at port.
func WideID(port int) string { return fmt.Sprintf("%040d", port) }
