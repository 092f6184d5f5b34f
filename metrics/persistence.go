package metrics

import (
	"github.com/cellserver/cellserver/persistence"
	"github.com/prometheus/client_golang/prometheus"
)

// PersistenceCollector reports the persistence write path: queue depth,
// changes written, the latency of the last batch write and sync, and disk
// use. Pass it in Sources.Extra when persistence is on.
func PersistenceCollector(w *persistence.Writer, st persistence.Store) prometheus.Collector {
	return &persistCollector{w: w, st: st,
		pending:  prometheus.NewDesc(Namespace+"_persistence_pending_changes", "Changes queued for the store, not yet written.", nil, nil),
		written:  prometheus.NewDesc(Namespace+"_persistence_written_changes_total", "Changes written to the store.", nil, nil),
		flushLat: prometheus.NewDesc(Namespace+"_persistence_last_write_seconds", "Duration of the last batch write.", nil, nil),
		syncLat:  prometheus.NewDesc(Namespace+"_persistence_last_sync_seconds", "Duration of the last sync to disk.", nil, nil),
		lastSync: prometheus.NewDesc(Namespace+"_persistence_last_sync_timestamp_seconds", "Unix time of the last sync to disk.", nil, nil),
		disk:     prometheus.NewDesc(Namespace+"_persistence_disk_bytes", "Bytes the store uses on disk.", nil, nil),
		pendB:    prometheus.NewDesc(Namespace+"_persistence_pending_bytes", "Bytes of the changes queued for the store, not yet written (capped by --persist-max-pending-bytes).", nil, nil),
		maxPendB: prometheus.NewDesc(Namespace+"_persistence_max_pending_bytes", "The cap on persistence_pending_bytes: past it, write commands wait.", nil, nil),
		waits:    prometheus.NewDesc(Namespace+"_persistence_backpressure_waits_total", "Write commands that waited for the store to catch up (pending bytes over the cap).", nil, nil),
		waitSec:  prometheus.NewDesc(Namespace+"_persistence_backpressure_wait_seconds_total", "Time write commands waited for the store to catch up.", nil, nil),
		failed:   prometheus.NewDesc(Namespace+"_persistence_failed", "1 while the store refuses writes (write commands are refused with MISCONF until a write succeeds).", nil, nil),
		cks:      prometheus.NewDesc(Namespace+"_persistence_checkpoints_total", "Checkpoints completed: the keys changed since the previous one written from memory to pebble, and the change log before it dropped.", nil, nil),
		ckFail:   prometheus.NewDesc(Namespace+"_persistence_checkpoint_failures_total", "Checkpoints that failed (the change log is kept; the next one writes what this one could not).", nil, nil),
		ckSec:    prometheus.NewDesc(Namespace+"_persistence_last_checkpoint_seconds", "Duration of the last completed checkpoint.", nil, nil),
		ckKeys:   prometheus.NewDesc(Namespace+"_persistence_last_checkpoint_keys", "Keys written by the last completed checkpoint.", nil, nil),
		logB:     prometheus.NewDesc(Namespace+"_persistence_changelog_bytes", "Bytes written to the change log since the last checkpoint began (a checkpoint starts past --checkpoint-bytes).", nil, nil),
	}
}

type persistCollector struct {
	w                                                           *persistence.Writer
	st                                                          persistence.Store
	pending, written, flushLat, syncLat, lastSync, disk, failed *prometheus.Desc
	pendB, maxPendB, waits, waitSec                             *prometheus.Desc
	cks, ckFail, ckSec, ckKeys, logB                            *prometheus.Desc
}

func (c *persistCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.written, c.flushLat, c.syncLat, c.lastSync, c.disk, c.failed, c.pendB, c.maxPendB, c.waits, c.waitSec} {
		ch <- d
	}
	if _, ok := c.st.(persistence.Checkpointer); ok {
		for _, d := range []*prometheus.Desc{c.cks, c.ckFail, c.ckSec, c.ckKeys, c.logB} {
			ch <- d
		}
	}
}

func (c *persistCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	gauge(ch, c.pending, float64(s.Pending))
	counter(ch, c.written, float64(s.Written))
	gauge(ch, c.pendB, float64(s.PendingBytes))
	gauge(ch, c.maxPendB, float64(s.MaxPending))
	counter(ch, c.waits, float64(s.BackpressureWaits))
	counter(ch, c.waitSec, s.BackpressureWait.Seconds())
	gauge(ch, c.flushLat, s.LastWriteTime.Seconds())
	gauge(ch, c.syncLat, s.LastSyncTime.Seconds())
	if !s.LastSync.IsZero() {
		gauge(ch, c.lastSync, float64(s.LastSync.UnixNano())/1e9)
	}
	gauge(ch, c.disk, float64(c.st.DiskUsage()))
	failed := 0.0
	if s.Err != nil {
		failed = 1
	}
	gauge(ch, c.failed, failed)
	if cp, ok := c.st.(persistence.Checkpointer); ok {
		ck := cp.CheckpointStats()
		counter(ch, c.cks, float64(ck.Checkpoints))
		counter(ch, c.ckFail, float64(ck.Failed))
		gauge(ch, c.ckSec, ck.LastDuration.Seconds())
		gauge(ch, c.ckKeys, float64(ck.LastKeys))
		gauge(ch, c.logB, float64(ck.LogBytes))
	}
}
