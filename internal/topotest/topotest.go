// Package topotest builds cluster topologies (CELLCLUSTER CONFIG's JSON)
// for tests.
package topotest

import (
	"fmt"
	"strings"

	"github.com/cellserver/cellserver/keyslot"
)

// Wide returns a topology of shards shards of one master and replicas
// replicas each, the 16384 slots dealt to them one at a time in turn
// (every range is one slot, so CLUSTER SLOTS lists a shard's nodes once
// per slot), node ids padded to idLen bytes (at least 6), every node at
// ip, ports from 10000 (five digits, as most are).
func Wide(shards, replicas, idLen int, ip string) string {
	var b strings.Builder
	port := 10000
	node := func() {
		id := fmt.Sprintf("n%05d", port)
		id += strings.Repeat("x", max(idLen-len(id), 0))
		fmt.Fprintf(&b, `{"id":%q,"ip":%q,"port":%d}`, id, ip, port)
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
