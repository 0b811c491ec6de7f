// Command localcluster runs a local control plane (etcd and kube-apiserver on
// 127.0.0.1, with the Gateway API CRDs installed) until it is interrupted,
// then stops it and removes its state. It prints the kubeconfig path and how
// to use it.
//
//	make cluster            # or: cd e2e && go run ./cmd/localcluster
//	go run ./cmd/localcluster -dir /tmp/qp -keep   # keep state and logs
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

func run() error {
	var opts cluster.Options
	flag.StringVar(&opts.Dir, "dir", "", "state directory (default: a temporary directory, removed on exit)")
	flag.BoolVar(&opts.KeepDir, "keep", false, "keep the temporary state directory on exit")
	flag.StringVar(&opts.BinDir, "bin-dir", "", "directory with kube-apiserver and etcd (default: $QP_BIN_DIR or e2e/.bin)")
	flag.BoolVar(&opts.SkipGatewayAPI, "no-gateway-api", false, "do not install the Gateway API CRDs")
	verbose := flag.Bool("v", false, "log progress")
	flag.Parse()

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

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
	fmt.Printf(`control plane ready in %v (etcd %v, kube-apiserver %v, Gateway API CRDs %v)

  kubeconfig:     %s
  API server:     %s
  etcd:           %s (peer port %d)
  identity:       %s (group %s: bypasses RBAC) via client certificate
  audit log:      %s
  logs:           %s
                  %s

Use it:
  export KUBECONFIG=%s
  kubectl get --raw /readyz
  kubectl get crds

Press Ctrl-C to stop; the state directory is removed unless -dir or -keep was given.
`,
		t.Total.Round(time.Millisecond), t.Etcd.Round(time.Millisecond), t.APIServer.Round(time.Millisecond), t.GatewayAPI.Round(time.Millisecond),
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
