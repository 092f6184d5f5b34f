// Command httpapi is an HTTP service whose every client IP may make 5
// requests per 10 s, counted by cellserver through the httplimit
// middleware: the client example of docs/client.md.
//
//	go run ./cmd/cellserver &
//	go run ./examples/httpapi --redis 127.0.0.1:6379 --addr 127.0.0.1:8080 --on-error local
//	curl -i http://127.0.0.1:8080/
//
// The sixth request within 10 s gets 429 with Retry-After and the
// RateLimit headers. --on-error says what happens while cellserver cannot
// answer within --deadline: open lets requests through, closed answers
// 503, local decides in this process at --local-share of the limit.
// X-Forwarded-For is believed only from the --trusted-proxy prefixes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/client/httplimit"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "httpapi:", err)
		os.Exit(2)
	}
}

// options are the command line.
type options struct {
	redis, addr, onError, trusted string
	deadline                      time.Duration
	share                         float64
}

func parse(args []string) (options, *httplimit.Options, error) {
	var o options
	fs := flag.NewFlagSet("httpapi", flag.ContinueOnError)
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "cellserver's `address`")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "`address` to serve HTTP on")
	fs.StringVar(&o.onError, "on-error", "open", "when cellserver cannot answer: open, closed or local")
	fs.DurationVar(&o.deadline, "deadline", 50*time.Millisecond, "how long a request waits for cellserver")
	fs.Float64Var(&o.share, "local-share", 0.5, "with --on-error local, the `fraction` of the limit this process admits alone")
	fs.StringVar(&o.trusted, "trusted-proxy", "", "comma-separated `prefixes` (10.0.0.0/8,...) whose X-Forwarded-For is believed")
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	if fs.NArg() > 0 {
		return o, nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var mode httplimit.FailMode
	switch o.onError {
	case "open":
		mode = httplimit.Open
	case "closed":
		mode = httplimit.Closed
	case "local":
		mode = httplimit.Local
	default:
		return o, nil, fmt.Errorf("--on-error %q: want open, closed or local", o.onError)
	}
	var trusted []netip.Prefix
	for _, s := range strings.Split(o.trusted, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return o, nil, fmt.Errorf("--trusted-proxy: %v", err)
		}
		trusted = append(trusted, p)
	}
	return o, &httplimit.Options{
		Limits: []httplimit.Limit{{
			Name: "per-ip", Quota: 5, Window: 10 * time.Second,
			Key: httplimit.ClientIP(trusted...),
		}},
		Deadline:   o.deadline,
		OnError:    mode,
		LocalShare: o.share,
	}, nil
}

// handler returns the service behind the middleware, and the go-redis
// client to close.
func handler(o options, lo *httplimit.Options, log *slog.Logger) (http.Handler, *redis.Client, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  o.redis,
		ContextTimeoutEnabled: true, // the middleware's deadline reaches the socket
		DialTimeout:           time.Second,
		MaxRetries:            -1, // a failed call falls back at once; no retry inside the deadline
	})
	lo.OnDecision = func(r *http.Request, d httplimit.Decision) {
		if d.Outcome == httplimit.Fallback || d.Outcome == httplimit.Error {
			log.Warn("limiter unavailable", "outcome", d.Outcome, "source", d.Source, "err", d.Err)
		}
	}
	mw, err := httplimit.New(client.New(rdb), *lo)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%+v\n", mw.Stats())
	})
	return mw.Handler(mux), rdb, nil
}

func run(args []string) error {
	o, lo, err := parse(args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	h, rdb, err := handler(o, lo, log)
	if err != nil {
		return err
	}
	defer rdb.Close()
	srv := &http.Server{Addr: o.addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("httpapi serving", "addr", o.addr, "cellserver", o.redis, "on-error", o.onError)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
