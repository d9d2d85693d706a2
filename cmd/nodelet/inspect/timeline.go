// Package inspect holds the commands that read a node's state without running
// it: `nodelet journal` (the node journal on disk) and `nodelet timeline`
// (a pod's lifecycle timeline through the API server).
package inspect

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
)

// TimelineCommand is `nodelet timeline [flags] [NAMESPACE/]NAME`: it asks
// the kubelet API of the pod's node, through the API server (the same
// authentication and authorization as kubectl logs), for the pod's
// lifecycle timeline and prints it as a table with a waterfall, or as
// JSON.
func TimelineCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := pflag.NewFlagSet("nodelet timeline", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	node := fs.String("node", "", "node the pod runs on (default: read from the pod)")
	output := fs.StringP("output", "o", "text", "text (a table with a waterfall) or json")
	uid := fs.Bool("uid", false, "the argument is the pod's UID (needs --node)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("timeline: %w\nusage: nodelet timeline [--kubeconfig FILE] [--node NODE] [-o text|json] [--uid] [NAMESPACE/]NAME\n%s", err, fs.FlagUsages())
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("timeline: want one pod, as [NAMESPACE/]NAME or, with --uid, a UID\n%s", fs.FlagUsages())
	}
	if *output != "text" && *output != "json" {
		return fmt.Errorf("timeline: output %q: want text or json", *output)
	}
	if *kubeconfig == "" {
		return fmt.Errorf("timeline: no kubeconfig: set --kubeconfig or KUBECONFIG")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("timeline: kubeconfig %s: %w", *kubeconfig, err)
	}
	client, err := kubeclient.New(cfg)
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	path := []string{"debug", "pods", fs.Arg(0), "timeline"}
	if !*uid {
		ns, name, ok := strings.Cut(fs.Arg(0), "/")
		if !ok {
			ns, name = metav1.NamespaceDefault, fs.Arg(0)
		}
		path = []string{"debug", "pods", ns, name, "timeline"}
		if *node == "" {
			pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("timeline: finding the pod's node: %w", err)
			}
			*node = pod.Spec.NodeName
		}
	}
	if *node == "" {
		return fmt.Errorf("timeline: which node? The pod is not scheduled, or --uid was given without --node")
	}
	body, err := client.CoreV1().RESTClient().Get().AbsPath(append([]string{"/api/v1/nodes", *node, "proxy"}, path...)...).
		Param("format", *output).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("timeline: node %s: %w: %s", *node, err, strings.TrimSpace(string(body)))
	}
	_, err = out.Write(body)
	return err
}
