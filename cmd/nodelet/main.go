// Command nodelet is a Kubernetes node agent: it runs the pods of static
// manifests (and, in cluster mode, of the API server) on a CRI runtime and
// reports their status. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/cmd/nodelet/app"
	"github.com/nodelet/nodelet/cmd/nodelet/inspect"
	"github.com/nodelet/nodelet/cmd/nodelet/options"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "timeline" {
		if err := inspect.TimelineCommand(context.Background(), os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "nodelet %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "journal" {
		if err := inspect.JournalCommand(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "nodelet %v\n", err)
			os.Exit(1)
		}
		return
	}
	opts, err := options.Parse(os.Args[1:])
	var answer *options.Answer
	if errors.As(err, &answer) {
		fmt.Print(answer.Text)
		return
	}
	if err == nil {
		err = options.ApplyLogging(opts)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet: %v\n", err)
		os.Exit(1)
	}
	// SIGINT and SIGTERM stop nodelet (a service restart, a package
	// upgrade); the pods keep running. A node shutdown comes from
	// systemd-logind instead.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = app.Run(ctx, opts)
	klog.Flush()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet: %v\n", err)
		os.Exit(1)
	}
}
