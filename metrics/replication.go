package metrics

import (
	"github.com/cellserver/cellserver/replication"
	"github.com/prometheus/client_golang/prometheus"
)

// ReplicationCollector reports the node's replication role and links:
// role, replicas attached, their largest lag behind this primary (bytes
// of change stream and seconds since their acknowledgement), a replica's
// link to its primary, and the resyncs served. Pass it in Sources.Extra.
func ReplicationCollector(r *replication.Replication) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_replication_"+name, help, nil, nil)
	}
	return &replCollector{r: r,
		replica:   d("replica", "1 when this node is a replica, 0 when it is a primary."),
		replicas:  d("connected_replicas", "Replicas attached to this node."),
		lagBytes:  d("lag_bytes", "Largest lag of an online replica behind this node's offset, in bytes of change stream, by its last acknowledgement."),
		lagSecs:   d("lag_seconds", "Longest time since an online replica's last acknowledgement."),
		offset:    d("offset_bytes", "Replication offset: change stream produced (primary) or applied (replica)."),
		linkUp:    d("link_up", "A replica: 1 while in sync with its primary (master_link_status:up). A primary: 1."),
		linkDown:  d("link_down_seconds", "A replica: seconds its link to its primary has been down (0 while up)."),
		full:      d("full_resyncs_total", "Full copies this node served to replicas (INFO sync_full)."),
		partial:   d("partial_resyncs_total", "Replicas this node let continue from its backlog (INFO sync_partial_ok)."),
		partialKO: d("partial_resyncs_refused_total", "Partial resyncs asked for and refused (INFO sync_partial_err)."),
		received:  d("full_resyncs_received_total", "Full copies this node received as a replica."),
	}
}

type replCollector struct {
	r                                                                                                  *replication.Replication
	replica, replicas, lagBytes, lagSecs, offset, linkUp, linkDown, full, partial, partialKO, received *prometheus.Desc
}

func (c *replCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.replica, c.replicas, c.lagBytes, c.lagSecs, c.offset, c.linkUp, c.linkDown,
		c.full, c.partial, c.partialKO, c.received} {
		ch <- d
	}
}

func (c *replCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.Stats()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	gauge(ch, c.replica, b(s.Replica))
	gauge(ch, c.replicas, float64(s.ConnectedReplicas))
	gauge(ch, c.lagBytes, float64(s.MaxLagBytes))
	gauge(ch, c.lagSecs, s.MaxLagSeconds)
	gauge(ch, c.offset, float64(s.Offset))
	gauge(ch, c.linkUp, b(s.LinkUp))
	gauge(ch, c.linkDown, s.LinkDownSeconds)
	counter(ch, c.full, float64(s.SyncFull))
	counter(ch, c.partial, float64(s.SyncPartialOK))
	counter(ch, c.partialKO, float64(s.SyncPartialErr))
	counter(ch, c.received, float64(s.FullSyncsReceived))
}
