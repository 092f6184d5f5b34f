package persistence

import (
	"fmt"
	"strings"
	"time"
)

// Info is INFO's persistence section (Redis's fields where they exist,
// cellserver's own after them) for a server keeping its data in dir,
// written through w to st: the writer's queue, its last writes and syncs
// and their errors, what was loaded at startup (loaded), the damage
// found in the newest WAL then (damage, with OpenOptions.LoadDamagedWAL),
// with the store's own lines (InfoReporter) before those of the damage.
func Info(dir string, w *Writer, st Store, loaded LoadStats, damage WALDamage) []string {
	ws := w.Stats()
	unix := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.Unix()
	}
	status, lastErr := "ok", ""
	if ws.Err != nil {
		status, lastErr = "err", strings.NewReplacer("\r", " ", "\n", " ").Replace(ws.Err.Error())
	}
	du := st.DiskUsage()
	mode := "pebble"
	if _, ok := st.(Checkpointer); ok {
		mode = "changelog" // a change log with checkpoints into pebble
	}
	lines := []string{
		"loading:0",
		// Redis's field when AOF is on: the data directory's size.
		fmt.Sprintf("aof_current_size:%d", du),
		"persistence_mode:" + mode,
		"data_dir:" + dir,
		"fsync:" + ws.Mode.String(),
		fmt.Sprintf("pending_changes:%d", ws.Pending),
		fmt.Sprintf("written_changes:%d", ws.Written),
		fmt.Sprintf("pending_bytes:%d", ws.PendingBytes),
		fmt.Sprintf("max_pending_bytes:%d", ws.MaxPending),
		fmt.Sprintf("backpressure_waits:%d", ws.BackpressureWaits),
		fmt.Sprintf("backpressure_wait_usec:%d", ws.BackpressureWait.Microseconds()),
		fmt.Sprintf("last_write_time:%d", unix(ws.LastWrite)),
		fmt.Sprintf("last_write_usec:%d", ws.LastWriteTime.Microseconds()),
		fmt.Sprintf("last_sync_time:%d", unix(ws.LastSync)),
		fmt.Sprintf("last_sync_usec:%d", ws.LastSyncTime.Microseconds()),
		"last_write_status:" + status,
		"last_write_error:" + lastErr,
		fmt.Sprintf("writes_refused_since:%d", unix(ws.FailingSince)),
		fmt.Sprintf("failed_write_attempts:%d", ws.Failures),
		fmt.Sprintf("keys_loaded:%d", loaded.Keys),
		fmt.Sprintf("expired_dropped_at_load:%d", loaded.Expired),
		fmt.Sprintf("load_time_usec:%d", loaded.Duration.Microseconds()),
		fmt.Sprintf("disk_usage_bytes:%d", du),
	}
	if r, ok := st.(InfoReporter); ok {
		lines = append(lines, r.Info()...)
	}
	return append(lines, walDamageInfo(damage)...)
}

// walDamageInfo is the part of INFO persistence about the damage found in
// the newest WAL at startup (with LoadDamagedWAL): the changes dropped.
func walDamageInfo(d WALDamage) []string {
	return []string{
		fmt.Sprintf("loaded_damaged_wal:%d", map[bool]int{false: 0, true: 1}[d.Damaged()]),
		fmt.Sprintf("damaged_wal_dropped_records:%d", d.DroppedRecords),
		fmt.Sprintf("damaged_wal_dropped_changes:%d", d.DroppedChanges),
		fmt.Sprintf("damaged_wal_dropped_bytes:%d", d.DroppedBytes),
	}
}
