// Command localcluster runs a local control plane (etcd and kube-apiserver on
// 127.0.0.1, with the Gateway API CRDs installed unless -gateway-api=false)
// until it is interrupted, then stops it and removes its state. It prints the
// kubeconfig path and how to use it.
//
//	make cluster                           # or: cd e2e && go run ./cmd/localcluster
//	make cluster ARGS="-gateway-api=false" # flags after ARGS= are passed on
//	go run ./cmd/localcluster -dir /tmp/qp -keep   # keep state and logs
//
// The API server writes an audit log, audit.log in the state directory (its
// path is printed at start): one JSON line per write to a status
// subresource or to a Lease — who (user.username), verb, resource,
// namespace/name, response code — and nothing else (cluster.AuditPolicy).
// It is the quickest count of what a controller writes, e.g. status PATCH
// requests per user; -h shows the command.
//
// SIGINT, SIGTERM and SIGHUP stop the control plane (processes gone, state
// removed) before the command exits. So does the death of its parent process
// on Linux (for example `go run` ended by SIGTERM): it then gets SIGTERM.
// `make cluster` runs the built binary with exec, so make's own forwarding of
// SIGTERM reaches it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

// usage is the -h text: what the command does, where the audit log is and
// what it is good for, then the flags.
func usage() {
	out := flag.CommandLine.Output()
	fmt.Fprint(out, `Usage: localcluster [flags]     (make cluster ARGS="flags")

Runs etcd and kube-apiserver on 127.0.0.1 (with the Gateway API CRDs unless
-gateway-api=false) until interrupted, then stops them and removes the state
directory unless -dir or -keep was given. It prints the kubeconfig path and
the paths of the logs.

Audit log: STATE_DIR/audit.log (the path is printed at start; keep it after
the stop with -keep or -dir). The API server writes one JSON line per write
to a status subresource or to a Lease — user.username, verb,
objectRef.resource/subresource/namespace/name, responseStatus.code — and
nothing else. It is the quickest count of what a controller writes, for
example the status PATCH requests per user:

  jq -r 'select(.verb == "patch" and .objectRef.subresource == "status") | .user.username' \
    STATE_DIR/audit.log | sort | uniq -c

or, per user and response code, the Lease writes:

  jq -r 'select(.objectRef.resource == "leases") | "\(.user.username) \(.verb) \(.responseStatus.code)"' \
    STATE_DIR/audit.log | sort | uniq -c

kube-apiserver renews its own Lease in kube-system about every 10 s: expect
those lines too.

Flags:
`)
	flag.PrintDefaults()
}

func run() error {
	var opts cluster.Options
	flag.StringVar(&opts.Dir, "dir", "", "state directory (default: a temporary directory, removed on exit)")
	flag.BoolVar(&opts.KeepDir, "keep", false, "keep the temporary state directory on exit")
	flag.StringVar(&opts.BinDir, "bin-dir", "", "directory with kube-apiserver and etcd (default: $KUBEBUILDER_ASSETS, else $QP_BIN_DIR, else e2e/.bin)")
	gatewayAPI := flag.Bool("gateway-api", true, "install the Gateway API standard-channel CRDs (-gateway-api=false skips them)")
	verbose := flag.Bool("v", false, "log progress")
	flag.Usage = usage
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: flags only (see -help)", flag.Args())
	}
	opts.SkipGatewayAPI = !*gatewayAPI

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := stopWithParent(); err != nil {
		return err
	}

	fmt.Fprintln(os.Stderr, "starting etcd and kube-apiserver ...")
	cp, err := cluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "stopping ...")
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: stop:", err)
		}
	}()

	t := cp.Timings()
	ports := cp.Ports()
	gw := "Gateway API CRDs " + t.GatewayAPI.Round(time.Millisecond).String()
	if opts.SkipGatewayAPI {
		gw = "Gateway API CRDs not installed"
	}
	fmt.Printf(`control plane ready in %v (etcd %v, kube-apiserver %v, %s)

  kubeconfig:     %s
  API server:     %s
  etcd:           %s (peer port %d)
  identity:       %s (group %s: bypasses RBAC) via client certificate
  audit log:      %s
                  (every status and Lease write: who, verb, code; -h shows how to count them)
  logs:           %s
                  %s

Use it:
  export KUBECONFIG=%s
  kubectl get --raw /readyz
  kubectl get crds

Press Ctrl-C to stop; the state directory is removed unless -dir or -keep was given.
`,
		t.Total.Round(time.Millisecond), t.Etcd.Round(time.Millisecond), t.APIServer.Round(time.Millisecond), gw,
		cp.KubeconfigPath(), cp.Host(), cp.EtcdURL(), ports.EtcdPeer,
		cluster.AdminUser, cluster.AdminGroup,
		cp.AuditLogPath(), cp.APIServerLogPath(), cp.EtcdLogPath(),
		cp.KubeconfigPath())

	// Watch the components: if one dies, say so and exit.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if n := len(cp.Processes()); n != 2 {
				return fmt.Errorf("a component exited (see %s and %s)", cp.APIServerLogPath(), cp.EtcdLogPath())
			}
		}
	}
}
