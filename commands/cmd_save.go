package commands

import (
	"strings"
	"sync"
	"time"

	"github.com/tidwall/redcon"
)

// SAVE, BGSAVE, LASTSAVE and SHUTDOWN: the data directory's checkpoints
// and the server's clean stop, which ends with one. A checkpoint of the data directory (persistence/changelog)
// stands for Redis's RDB save: SAVE writes one and answers when it is
// stored, BGSAVE starts one in the background, LASTSAVE says when the
// last one succeeded. SHUTDOWN asks the server package for the clean
// shutdown SIGTERM takes (server.Server.ShutdownCommand).

// Saver is what SAVE, BGSAVE and LASTSAVE ask of the data directory.
type Saver interface {
	// Save writes a checkpoint now and returns once it is stored (or
	// failed); checkpoints run one at a time.
	Save() error
	// LastSave is when the last checkpoint succeeded (zero: none since
	// the start).
	LastSave() time.Time
}

// ShutdownOptions are SHUTDOWN's flags.
type ShutdownOptions struct {
	NoSave bool // NOSAVE: no final checkpoint (the change log is kept and replayed at the next start)
	Save   bool // SAVE: a final checkpoint even when it would not be made, an error without persistence
	Now    bool // NOW: do not wait for lagging replicas
	Force  bool // FORCE: stop even if the final checkpoint fails
}

// lifecycle is the state of SAVE, BGSAVE and SHUTDOWN.
type lifecycle struct {
	saver    Saver
	shutdown func(ShutdownOptions) error
	abort    func() bool

	mu       sync.Mutex
	bgsaving bool // a BGSAVE's checkpoint runs
}

// LASTSAVE: the Unix time of the last successful checkpoint; as in Redis,
// the start counts as one (what was loaded is on disk, and without
// persistence there is nothing to save).
func cmdLastSave(x *ctx) {
	t := x.s.started
	if sv := x.s.life.saver; sv != nil {
		if l := sv.LastSave(); l.After(t) {
			t = l
		}
	}
	x.int(t.Unix())
}

// SAVE: a checkpoint now; the connection waits for it on its own, the
// other clients are served meanwhile.
func cmdSave(x *ctx) {
	l := &x.s.life
	if l.saver == nil {
		x.errorReply(msgNoDataDir)
		return
	}
	l.mu.Lock()
	busy := l.bgsaving
	l.mu.Unlock()
	if busy {
		x.errorReply(msgBgsaveInProgress)
		return
	}
	resume, _ := x.block()
	go func() {
		if err := l.saver.Save(); err != nil {
			x.s.log.Error("SAVE: checkpoint failed", "err", err)
			resume([]byte("-ERR\r\n")) // Redis's shared.err
			return
		}
		resume(redcon.AppendOK(nil))
	}()
}

// BGSAVE [SCHEDULE]: a checkpoint in the background. SCHEDULE changes
// nothing: there is no other background job to wait for.
func cmdBgsave(x *ctx) {
	if len(x.args) > 2 || len(x.args) == 2 && !strings.EqualFold(string(x.args[1]), "schedule") {
		x.errorReply(msgSyntax)
		return
	}
	l := &x.s.life
	if l.saver == nil {
		x.errorReply(msgNoDataDir)
		return
	}
	l.mu.Lock()
	if l.bgsaving {
		l.mu.Unlock()
		x.errorReply(msgBgsaveInProgress)
		return
	}
	l.bgsaving = true
	l.mu.Unlock()
	log := x.s.log
	go func() {
		err := l.saver.Save()
		l.mu.Lock()
		l.bgsaving = false
		l.mu.Unlock()
		if err != nil {
			log.Error("BGSAVE: checkpoint failed", "err", err)
		}
	}()
	x.status("Background saving started")
}

// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT], parsed as Redis's
// shutdownCommand. On success the server closes the connection without a
// reply as it stops; on failure it keeps running and the client gets
// Redis's error.
func cmdShutdown(x *ctx) {
	var o ShutdownOptions
	abort := false
	for _, a := range x.args[1:] {
		switch strings.ToLower(string(a)) {
		case "nosave":
			o.NoSave = true
		case "save":
			o.Save = true
		case "now":
			o.Now = true
		case "force":
			o.Force = true
		case "abort":
			abort = true
		default:
			x.errorReply(msgSyntax)
			return
		}
	}
	if abort && o != (ShutdownOptions{}) || o.NoSave && o.Save {
		x.errorReply(msgSyntax)
		return
	}
	l := &x.s.life
	if abort {
		if l.abort != nil && l.abort() {
			x.ok()
		} else {
			x.errorReply(msgNoShutdown)
		}
		return
	}
	if l.shutdown == nil {
		x.errorReply(msgShutdownFailed)
		return
	}
	resume, _ := x.block()
	go func() {
		if err := l.shutdown(o); err != nil {
			x.s.log.Warn("SHUTDOWN failed; the server keeps running", "err", err)
			resume([]byte("-" + msgShutdownFailed + "\r\n"))
		}
		// On success the connection is closed with the others.
	}()
}
