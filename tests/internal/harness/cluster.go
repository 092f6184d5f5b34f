package harness

import (
	"encoding/json"
)

// The types below spell the CELLCLUSTER CONFIG format out again rather
// than reuse package cluster's: a change to the server's wire format must
// fail the suites, not follow along silently.

// Peer is a node as a cluster topology names it.
type Peer struct {
	ID   string `json:"id"` // 40 hex digits
	IP   string `json:"ip"`
	Port int    `json:"port"`
}

// SlotRange is a range of hash slots, both ends included.
type SlotRange struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Shard is a master, its replicas and the slots they serve.
type Shard struct {
	SlotRanges []SlotRange `json:"slot_ranges"`
	Master     Peer        `json:"master"`
	Replicas   []Peer      `json:"replicas"`
}

// TopologyJSON renders shards as CELLCLUSTER CONFIG (DFLYCLUSTER CONFIG)
// takes them; a shard without replicas has an empty list.
func TopologyJSON(shards []Shard) string {
	out := make([]Shard, len(shards))
	for i, s := range shards {
		if s.Replicas == nil {
			s.Replicas = []Peer{}
		}
		out[i] = s
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err) // plain strings and integers always marshal
	}
	return string(b)
}
