package stream

// MaxSize bounds a stream's memory (MemSize, entries and groups): XADD
// on a stream of this size or more is refused, and an audit entry for it
// dropped, so that a stream stays well below what one record of the
// change log holds (1 GiB) when it is logged whole. Redis has no such
// cap; 512 MiB is millions of entries.
const MaxSize = 512 << 20
