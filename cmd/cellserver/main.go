// Command cellserver runs the cellserver rate-limit server: a Redis-protocol
// server answering redis-cell's CL.THROTTLE. See README.md.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/cellserver/cellserver/server"
)

// version is what --version, INFO and the startup line report: the value
// set at build time with -ldflags "-X main.version=..." (make build,
// docker build), else the module version go install module@version
// records in the binary, else "dev".
var version string

func init() {
	info, ok := debug.ReadBuildInfo()
	version = pickVersion(version, info, ok)
}

// pickVersion chooses the version to report from the -X value and the
// build information. A plain go build of a checkout records the main
// module's version as "(devel)" (or, with VCS stamping, a pseudo-version
// such as v0.0.0-20260101000000-0123456789ab+dirty, which is kept).
func pickVersion(ldflags string, info *debug.BuildInfo, ok bool) string {
	if ldflags != "" {
		return ldflags
	}
	if ok && info != nil && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, starts the server and blocks until SIGINT/SIGTERM. It
// returns the process exit code. See handleSignals for the other signals.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "cluster" {
		return runCluster(args[1:], os.Getenv, os.Stdin, stdout, stderr)
	}
	cfg, code, done, health := loadConfig(args, os.Getenv, stdout, stderr)
	if done {
		return code
	}
	if health {
		if err := healthcheck(cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "cellserver: healthcheck failed: %v\n", err)
			return 1
		}
		return 0
	}
	logger := cfg.Logger // loadConfig's, also used by CONFIG REWRITE
	if logger == nil {
		logger = server.NewLogger(cfg, stderr)
		cfg.Logger = logger
	}
	cfg.Version = version
	defer startCPUProfile(os.Getenv, stderr)()
	srv, err := server.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "cellserver: cannot start: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal now kills the process at once
	}()
	var reload func()
	if cfg.Policies != "" || (cfg.RLSAddr != "" && cfg.RLSConfig != "") {
		reload = func() { // each logs its outcome
			if cfg.Policies != "" {
				srv.Commands().ReloadPolicies()
			}
			if cfg.RLSAddr != "" && cfg.RLSConfig != "" {
				srv.ReloadRLS()
			}
		}
	}
	defer handleSignals(logger, reload)()
	if err := srv.Run(ctx); err != nil {
		logger.Error("cellserver stopped with an error", "err", err)
		return 1
	}
	return 0
}

// ignoredSignals are the signals whose default action would end the
// process at once, without writing pending changes, and that a process
// manager or a script may send to a long-running server: SIGHUP (a closed
// terminal, or "reload" in many service files), SIGUSR1 and SIGUSR2
// ("reopen logs" in logrotate scripts). As Redis ignores SIGHUP, cellserver
// ignores them and logs it, except SIGHUP with --policies or --rls-config:
// it reloads the policy file (as CL.POLICY RELOAD) and the Envoy rate limit
// configuration (server.ReloadRLS). Logs go to stderr: nothing to reopen.
// SIGQUIT keeps Go's behaviour: a goroutine dump on stderr and exit status
// 2, for debugging, losing what a crash loses under the fsync policy.
var ignoredSignals = []os.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// handleSignals logs and ignores ignoredSignals, and ignores SIGPIPE (as
// Redis does: a closed log pipe must not kill the server; the write fails
// instead); with reload set, SIGHUP calls it instead. The returned
// function stops it.
func handleSignals(logger *slog.Logger, reload func()) (stop func()) {
	signal.Ignore(syscall.SIGPIPE)
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, ignoredSignals...)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-ch:
				if sig == syscall.SIGHUP && reload != nil {
					logger.Info("SIGHUP: reloading the policy file and the Envoy rate limit configuration (those in use)")
					reload()
					continue
				}
				logger.Info("signal ignored", "signal", signalName(sig))
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}

// signalName is "SIGHUP" for syscall.SIGHUP (Go's String says "hangup").
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	}
	return sig.String()
}
