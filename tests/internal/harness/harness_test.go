package harness

import (
	"reflect"
	"testing"

	"github.com/cellserver/cellserver/internal/topotest"
)

func TestInfoFields(t *testing.T) {
	got := InfoFields("# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:6380\r\n\r\n# Keyspace\r\ndb0:keys=1,expires=0\r\n")
	want := map[string]string{"role": "slave", "master_host": "127.0.0.1", "master_port": "6380", "db0": "keys=1,expires=0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("InfoFields = %v, want %v", got, want)
	}
}

func TestTopologyJSON(t *testing.T) {
	got := TopologyJSON([]Shard{
		{SlotRanges: []SlotRange{{0, 8191}}, Master: Peer{topotest.ID("a"), "127.0.0.1", 7000}, Replicas: []Peer{{topotest.ID("b"), "127.0.0.1", 7001}}},
		{SlotRanges: []SlotRange{{8192, 16383}}, Master: Peer{topotest.ID("c"), "127.0.0.1", 7002}},
	})
	want := `[{"slot_ranges":[{"start":0,"end":8191}],"master":{"id":"0000000000000000000000000000000000000061","ip":"127.0.0.1","port":7000},"replicas":[{"id":"0000000000000000000000000000000000000062","ip":"127.0.0.1","port":7001}]},` +
		`{"slot_ranges":[{"start":8192,"end":16383}],"master":{"id":"0000000000000000000000000000000000000063","ip":"127.0.0.1","port":7002},"replicas":[]}]`
	if got != want {
		t.Errorf("TopologyJSON =\n%s\nwant\n%s", got, want)
	}
}

func TestAgreed(t *testing.T) {
	for _, c := range []struct {
		addrs []string
		want  string
	}{
		{[]string{"a:1", "a:1", "a:1"}, "a:1"},
		{[]string{"a:1", "b:1", "a:1"}, ""},
		{[]string{"", "", ""}, ""},
	} {
		if got := Agreed(c.addrs); got != c.want {
			t.Errorf("Agreed(%q) = %q, want %q", c.addrs, got, c.want)
		}
	}
}
