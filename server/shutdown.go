package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/persistence"
)

// SHUTDOWN, SAVE, BGSAVE and LASTSAVE (commands/cmd_shutdown.go) reach the
// server through the hooks of this file. SHUTDOWN takes the path SIGTERM
// takes (Run): it does, as Redis's prepareForShutdown and finishShutdown,
//
//  1. unless NOW (or --shutdown-timeout 0), wait for the replicas to
//     acknowledge the replication offset of the moment, up to
//     --shutdown-timeout (SHUTDOWN ABORT cancels the wait, and the
//     command fails);
//  2. unless NOSAVE, a checkpoint of the data directory; if it fails the
//     server keeps running and the command fails, unless FORCE. SAVE
//     without a data directory fails the same way (nothing to save to);
//  3. then the graceful stop of Run: no new connections, in-flight
//     commands finish, pending changes written and synced, a last
//     checkpoint (none after NOSAVE: the change log stays, synced, and is
//     replayed at the next start), every connection closed (the SHUTDOWN
//     client's without a reply, as Redis), exit status 0.

// errShutdownAborted is a SHUTDOWN cancelled by SHUTDOWN ABORT.
var errShutdownAborted = errors.New("shutdown aborted by SHUTDOWN ABORT")

// shutdownState is the SHUTDOWN in progress, if any.
type shutdownState struct {
	mu      sync.Mutex
	active  *shutdownAttempt
	stopReq chan struct{} // closed once a SHUTDOWN succeeded: Run stops
	once    sync.Once
	running bool // Run serves (else the command stops the server itself)
	waited  bool // the replicas were waited for (Run does not wait again)
}

// shutdownAttempt is one SHUTDOWN; SHUTDOWNs sent while it runs share its
// outcome (in Redis they stay blocked with it).
type shutdownAttempt struct {
	done  chan struct{}
	abort chan struct{}
	err   error
}

// saver is SAVE, BGSAVE and LASTSAVE over the data directory's store.
type saver struct{ store persistence.Store }

func (v saver) Save() error {
	if sv, ok := v.store.(persistence.Saver); ok {
		return sv.Checkpoint()
	}
	return v.store.Sync()
}

func (v saver) LastSave() time.Time {
	if cp, ok := v.store.(persistence.Checkpointer); ok {
		return cp.CheckpointStats().LastOK
	}
	return time.Time{}
}

// aofSyncer is WAITAOF's view of the write path: nil without one (a nil
// *persistence.Writer must not become a non-nil interface).
func aofSyncer(w *persistence.Writer) commands.AOFSyncer {
	if w == nil {
		return nil
	}
	return w
}

// shutdownCommand is commands.Config.Shutdown.
func (s *Server) shutdownCommand(o commands.ShutdownOptions) error {
	sh := &s.shut
	sh.mu.Lock()
	if a := sh.active; a != nil {
		sh.mu.Unlock()
		<-a.done
		return a.err
	}
	a := &shutdownAttempt{done: make(chan struct{}), abort: make(chan struct{})}
	sh.active = a
	sh.mu.Unlock()
	a.err = s.prepareShutdown(o, a.abort)
	sh.mu.Lock()
	if a.err != nil {
		sh.active = nil
	} else {
		sh.waited = true
	}
	running := sh.running
	sh.mu.Unlock()
	close(a.done)
	if a.err != nil {
		return a.err
	}
	sh.once.Do(func() { close(sh.stopReq) })
	if !running { // served by Serve alone (in-process): stop it here
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
			defer cancel()
			_ = s.Shutdown(ctx)
		}()
	}
	return nil
}

// abortShutdown is commands.Config.AbortShutdown.
func (s *Server) abortShutdown() bool {
	sh := &s.shut
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := sh.active
	if a == nil {
		return false
	}
	select {
	case <-a.abort:
		return false
	default:
	}
	select {
	case <-a.done: // past the point of no return
		return false
	default:
	}
	close(a.abort)
	s.cfg.Logger.Info("Shutdown manually aborted.")
	return true
}

// prepareShutdown runs steps 1 and 2 of SHUTDOWN.
func (s *Server) prepareShutdown(o commands.ShutdownOptions, abort <-chan struct{}) error {
	s.cfg.Logger.Warn("User requested shutdown...")
	if !o.Now && !s.waitReplicas(abort) {
		return errShutdownAborted
	}
	sv, _ := s.store.(persistence.Saver)
	switch {
	case o.NoSave:
		if sv != nil {
			sv.SkipFinalCheckpoint()
		}
	case sv != nil:
		s.cfg.Logger.Info("Saving the final checkpoint before exiting.")
		if err := sv.Checkpoint(); err != nil {
			if !o.Force {
				s.cfg.Logger.Warn("Error trying to save the DB, can't exit.", "err", err)
				return err
			}
			s.cfg.Logger.Warn("Error trying to save the DB. Exit anyway.", "err", err)
		}
	case o.Save:
		err := errors.New("SHUTDOWN SAVE: persistence is off (no --data-dir), nothing to save to")
		if !o.Force {
			s.cfg.Logger.Warn("Error trying to save the DB, can't exit.", "err", err)
			return err
		}
		s.cfg.Logger.Warn("Error trying to save the DB. Exit anyway.", "err", err)
	}
	return nil
}

// waitReplicas waits, up to --shutdown-timeout, for every online replica
// to acknowledge the replication offset of the moment (Redis's
// shutdown-timeout; its isReadyToShutdown), and logs how many did. It
// reports false if abort closed first. Writes that arrive while it waits
// are not waited for (Redis pauses them; cellserver serves them, and a
// replica may miss the last of them).
func (s *Server) waitReplicas(abort <-chan struct{}) bool {
	if s.cfg.ShutdownTimeout <= 0 {
		return true
	}
	ro := s.repl.Role()
	if ro.Replica || len(ro.Replicas) == 0 {
		return true
	}
	n := len(ro.Replicas)
	if s.repl.Acked(ro.Offset) < n {
		s.cfg.Logger.Info("Waiting for replicas before shutting down.", "replicas", n, "offset", ro.Offset)
	}
	got := make(chan int, 1)
	cancel := s.repl.Wait(ro.Offset, n, s.cfg.ShutdownTimeout, func(c int) { got <- c })
	select {
	case c := <-got:
		if c < n {
			s.cfg.Logger.Warn("Lagging replicas at shutdown", "lagging", n-c, "offset", ro.Offset)
		}
		s.cfg.Logger.Info("replicas in sync when shutting down", "in_sync", c, "replicas", n)
		return true
	case <-abort:
		cancel()
		return false
	}
}
