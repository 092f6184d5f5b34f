// Command cellserver runs the cellserver rate-limit server: a Redis-protocol
// server answering redis-cell's CL.THROTTLE. See README.md.
package main

import (
	"context"
	"fmt"
	"io"
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
	cfg, code, done := loadConfig(args, os.Getenv, stdout, stderr)
	if done {
		return code
	}
	logger := server.NewLogger(cfg, stderr)
	cfg.Logger = logger
	cfg.Version = version
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
	if err := srv.Run(ctx); err != nil {
		logger.Error("cellserver stopped with an error", "err", err)
		return 1
	}
	return 0
}
