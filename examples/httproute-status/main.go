// Command httproute-status is the example HTTPRoute status controller of
// quietpatch: it keeps status.parents of Gateway API HTTPRoutes up to date
// for one controller name, patching only what changed, through a bounded
// queue, from one replica at a time.
//
// The wiring lives in package controller (so that tests and the e2e suite
// can run it in-process); this command parses flags, sets up logging and
// signals, and maps the outcome to an exit status: 0 after SIGINT or
// SIGTERM (the lease vacated), 1 when the controller fails, 2 for invalid
// flags. See README.md for the flags and how the example maps onto the
// library.
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

	"k8s.io/klog/v2"

	"github.com/quietpatch/quietpatch/examples/httproute-status/controller"
)

// Exit statuses.
const (
	exitOK        = 0
	exitFailed    = 1
	exitBadUsage  = 2
	commandPrefix = "httproute-status: "
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run is the whole command but for the process: it returns the exit
// status. ctx ends on SIGINT/SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) int {
	cfg, err := parseFlags(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout, getenv)
		return exitOK
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "%s%v\nRun 'httproute-status -h' for the flags.\n", commandPrefix, err)
		return exitBadUsage
	}

	hopts := &slog.HandlerOptions{Level: cfg.logLevel}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if cfg.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	logger := slog.New(h)
	// client-go logs through klog (reflector errors, throttling notices):
	// send those to the same handler.
	klog.SetSlogLogger(logger)
	cfg.opts.Logger = logger
	for _, w := range cfg.warnings {
		logger.Warn(commandPrefix + w)
	}

	if err := controller.Run(ctx, cfg.opts); err != nil {
		logger.Error(commandPrefix+"exiting on failure", slog.Any("error", err))
		return exitFailed
	}
	logger.Info(commandPrefix + "stopped")
	return exitOK
}
