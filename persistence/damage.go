package persistence

import "fmt"

// WALDamage describes damage found before the end of the newest WAL.
//
// Pebble v1.1.5 replays the newest WAL up to its first chunk that does not
// read (a bad checksum, a bad header, zeros) and takes that point for its
// end, as it is after a crash in the middle of a write (a torn tail). It
// does not look further, so damage in the middle of the log silently drops
// every change after it. pebblestore's check of the newest WAL tells the
// two apart: after a torn tail no intact record of this log follows; after
// damage, some do.
type WALDamage struct {
	// File is the damaged WAL's path; empty when there is no damage.
	File string
	// Offset is where pebble stops reading: the start of the first record
	// that does not read.
	Offset int64
	// Reason is the record reader's error at Offset.
	Reason string
	// DroppedBytes runs from Offset to the end of the last intact record
	// found after it: the part of the log pebble drops.
	DroppedBytes int64
	// DroppedRecords and DroppedChanges count the intact records (write
	// batches) found after the damage and the changes (puts, deletes) they
	// hold. The damaged records themselves cannot be counted, so these are
	// lower bounds of what is lost.
	DroppedRecords int64
	DroppedChanges int64
}

// Damaged reports whether damage was found.
func (d WALDamage) Damaged() bool { return d.File != "" }

func (d WALDamage) String() string {
	if !d.Damaged() {
		return "no WAL damage"
	}
	return fmt.Sprintf("WAL %s is damaged at offset %d (%s): %d intact records (%d changes) follow in the next %d bytes and would be dropped",
		d.File, d.Offset, d.Reason, d.DroppedRecords, d.DroppedChanges, d.DroppedBytes)
}

// A WALChecker is a Store that checks its newest write-ahead log when it
// opens (pebblestore.Store): WALDamage returns what it found.
type WALChecker interface {
	WALDamage() WALDamage
}
