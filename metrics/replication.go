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
		syncN:     d("sync_replicas", "sync-replicas: replicas whose acknowledgement a change's reply waits for (0: asynchronous)."),
		fenced:    d("sync_fenced", "1 while this primary refuses writes because fewer than sync-replicas replicas acknowledge in time."),
		pending:   d("sync_held_batches", "Batches of replies held now for the replicas' acknowledgement."),
		held:      d("sync_held_total", "Batches of replies held for the replicas' acknowledgement (sync-replicas)."),
		refused:   d("sync_noreplicas_total", "Replies refused with NOREPLICAS by sync-replicas: held past sync-replicas-timeout, or refused while fenced."),
		fences:    d("sync_fences_total", "Times this primary started refusing writes for want of acknowledgements (fencing)."),
		ackWait:   d("sync_ack_wait_seconds", "Time held replies waited for their acknowledgement."),
	}
}

type replCollector struct {
	r                                                                                                  *replication.Replication
	replica, replicas, lagBytes, lagSecs, offset, linkUp, linkDown, full, partial, partialKO, received *prometheus.Desc
	syncN, fenced, pending, held, refused, fences, ackWait                                             *prometheus.Desc
}

func (c *replCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.replica, c.replicas, c.lagBytes, c.lagSecs, c.offset, c.linkUp, c.linkDown,
		c.full, c.partial, c.partialKO, c.received, c.syncN, c.fenced, c.pending, c.held, c.refused, c.fences, c.ackWait} {
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
	sy := c.r.SyncStats()
	gauge(ch, c.syncN, float64(sy.Replicas))
	gauge(ch, c.fenced, b(sy.Fenced))
	gauge(ch, c.pending, float64(sy.Pending))
	counter(ch, c.held, float64(sy.Held))
	counter(ch, c.refused, float64(sy.Refused))
	counter(ch, c.fences, float64(sy.Fences))
	buckets := make(map[float64]uint64, len(replication.AckBuckets))
	for i, le := range replication.AckBuckets {
		buckets[le] = sy.AckWait[i]
	}
	ch <- prometheus.MustNewConstHistogram(c.ackWait, sy.AckWaitCount, sy.AckWaitSum, buckets)
}
