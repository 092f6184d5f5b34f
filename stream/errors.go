package stream

import "errors"

// ErrNotBase: a delta does not start from the stream's state.
var ErrNotBase = errors.New("stream: delta does not apply to this stream's state")

// ErrCorrupt: an encoding or a delta is malformed.
var ErrCorrupt = errors.New("stream: malformed encoding")
