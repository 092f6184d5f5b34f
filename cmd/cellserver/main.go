// Command cellserver runs the cellserver rate-limit server: a Redis-protocol
// server answering redis-cell's CL.THROTTLE. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cellserver/cellserver/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, starts the server and blocks until SIGINT/SIGTERM. It
// returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, code, done := parseFlags(args, stdout, stderr)
	if done {
		return code
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	cfg.Logger = logger
	cfg.Version = version
	srv, err := server.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "cellserver: invalid configuration:\n%v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal now kills the process at once
	}()
	if err := srv.Run(ctx); err != nil {
		logger.Error("cellserver stopped with an error", "err", err)
		return 1
	}
	return 0
}

// parseFlags maps the command line onto a server.Config. done reports that
// the process should exit with code (for --help, --version, bad flags).
func parseFlags(args []string, stdout, stderr io.Writer) (cfg server.Config, code int, done bool) {
	fs := flag.NewFlagSet("cellserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&cfg.Addr, "addr", server.DefaultAddr, "TCP `address` to listen on")
	fs.IntVar(&cfg.Databases, "databases", 16, "number of databases (SELECT 0..n-1)")
	fs.IntVar(&cfg.Shards, "shards", 256, "lock shards per database (rounded up to a power of two)")
	fs.IntVar(&cfg.MaxClients, "maxclients", 10000, "maximum concurrent client connections")
	fs.DurationVar(&cfg.IdleTimeout, "timeout", 0, "close clients idle for this `duration` (0: never)")
	fs.Int64Var(&cfg.MaxBulkLen, "proto-max-bulk-len", 16<<20, "largest accepted argument, in `bytes`")
	fs.Int64Var(&cfg.MaxMultiBulkLen, "proto-max-multibulk-len", 1<<20, "most arguments in one command")
	fs.Int64Var(&cfg.MaxQueryBuffer, "client-query-buffer-limit", 64<<20, "most unparsed `bytes` buffered per client")
	fs.StringVar(&cfg.Password, "requirepass", "", "require AUTH with this `password`")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "how long shutdown waits for in-flight commands")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cellserver [options]\n\nA Redis-protocol rate-limit server answering CL.THROTTLE exactly as redis-cell.\n\nOptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return cfg, 0, true
		}
		return cfg, 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cellserver: unexpected argument %q\n", fs.Arg(0))
		return cfg, 2, true
	}
	if *showVersion {
		fmt.Fprintf(stdout, "cellserver %s\n", version)
		return cfg, 0, true
	}
	return cfg, 0, false
}
