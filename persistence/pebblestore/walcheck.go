package pebblestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cellserver/cellserver/persistence"
	"hash/crc32"
	"io"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble"
	walrecord "github.com/cockroachdb/pebble/record"
	"github.com/cockroachdb/pebble/vfs"
)

// The WAL's framing (pebble's record package): 32 KiB blocks of chunks,
// each with a header of checksum (4 bytes), length (2), type (1) and, in
// the recyclable format that pebble's LogWriter writes, the log number (4).
const (
	walBlockSize  = 32 << 10
	walHeaderSize = 11
	walChunkFull  = 5 // recyclable full, first, middle, last
	walChunkFirst = 6
	walChunkMid   = 7
	walChunkLast  = 8
	walBatchHead  = 12 // a batch: sequence number (8 bytes), count (4), entries
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// walChecksum is the record package's masked CRC-32C.
func walChecksum(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// checkNewestWAL reads the newest WAL of dir as pebble's replay does and,
// where the reading stops before the end of the file, looks for intact
// records of the same log after that point. It returns the damage it
// finds (the zero WALDamage for none) or an I/O error.
func checkNewestWAL(fs vfs.FS, dir string) (persistence.WALDamage, error) {
	names, err := fs.List(dir)
	if err != nil {
		return persistence.WALDamage{}, fmt.Errorf("persistence: read data directory %s: %w", dir, err)
	}
	var newest string
	var num uint64
	for _, n := range names {
		stem, ok := strings.CutSuffix(n, ".log")
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(stem, 10, 64); err == nil && (newest == "" || v > num) {
			newest, num = n, v
		}
	}
	if newest == "" {
		return persistence.WALDamage{}, nil
	}
	path := fs.PathJoin(dir, newest)
	f, err := fs.Open(path)
	if err != nil {
		return persistence.WALDamage{}, fmt.Errorf("persistence: read WAL: %w", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return persistence.WALDamage{}, fmt.Errorf("persistence: read WAL %s: %w", path, err)
	}
	d := scanWAL(data, uint32(num))
	if d.DroppedRecords == 0 {
		return persistence.WALDamage{}, nil
	}
	d.File = path
	return d, nil
}

// scanWAL is checkNewestWAL on the bytes of WAL number logNum, without
// setting File: DroppedRecords > 0 means damage.
func scanWAL(data []byte, logNum uint32) persistence.WALDamage {
	rr := walrecord.NewReader(bytes.NewReader(data), pebble.FileNum(logNum))
	var off int64
	var stop error
	for {
		off = rr.Offset()
		r, err := rr.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		if err == io.EOF {
			// The end, or a chunk header naming another log (what a
			// recycled WAL holds past its end), which damage can fake too.
			stop = errors.New("end of the log")
			break
		}
		if err != nil {
			stop = err
			break
		}
	}
	d := persistence.WALDamage{Offset: off, Reason: stop.Error()}
	var end int64
	// Every byte offset after the start of the record that did not read
	// may hold a chunk header: the framing is lost in the damaged block.
	// A record counts only if it starts after off and all its chunks are
	// intact, so the rest of a torn record does not count.
	for pos := off + 1; pos+walHeaderSize <= int64(len(data)); {
		n, changes := walRecordAt(data, pos, logNum)
		if n == 0 {
			pos++
			continue
		}
		d.DroppedRecords++
		d.DroppedChanges += changes
		pos += n
		end = pos
	}
	if d.DroppedRecords == 0 {
		return persistence.WALDamage{} // a torn tail: nothing intact follows
	}
	d.DroppedBytes = end - off
	return d
}

// walChunkAt returns the type, payload and length (header included) of an
// intact chunk of log logNum at pos, or ok false.
func walChunkAt(data []byte, pos int64, logNum uint32) (typ byte, payload []byte, size int64, ok bool) {
	if pos+walHeaderSize > int64(len(data)) {
		return 0, nil, 0, false
	}
	h := data[pos : pos+walHeaderSize]
	typ = h[6]
	if typ < walChunkFull || typ > walChunkLast || binary.LittleEndian.Uint32(h[7:11]) != logNum {
		return 0, nil, 0, false
	}
	length := int64(binary.LittleEndian.Uint16(h[4:6]))
	end := pos + walHeaderSize + length
	if end > int64(len(data)) || pos/walBlockSize != (end-1)/walBlockSize {
		return 0, nil, 0, false // past the file or across a block boundary
	}
	if walChecksum(data[pos+6:end]) != binary.LittleEndian.Uint32(h[0:4]) {
		return 0, nil, 0, false
	}
	return typ, data[pos+walHeaderSize : end], end - pos, true
}

// walRecordAt returns the length and the batch's change count of an
// intact record of log logNum starting at pos (a full chunk, or a first
// chunk, middle ones and a last one), or 0.
func walRecordAt(data []byte, pos int64, logNum uint32) (n int64, changes int64) {
	typ, payload, size, ok := walChunkAt(data, pos, logNum)
	if !ok || (typ != walChunkFull && typ != walChunkFirst) {
		return 0, 0
	}
	head := append([]byte(nil), payload[:min(len(payload), walBatchHead)]...)
	at := pos + size
	for typ != walChunkFull && typ != walChunkLast {
		if rest := walBlockSize - at%walBlockSize; rest < walHeaderSize {
			at += rest // the writer pads a block's tail too short for a header
		}
		typ, payload, size, ok = walChunkAt(data, at, logNum)
		if !ok || (typ != walChunkMid && typ != walChunkLast) {
			return 0, 0
		}
		if len(head) < walBatchHead {
			head = append(head, payload[:min(len(payload), walBatchHead-len(head))]...)
		}
		at += size
	}
	if len(head) == walBatchHead {
		changes = int64(binary.LittleEndian.Uint32(head[8:12]))
	}
	return at - pos, changes
}
