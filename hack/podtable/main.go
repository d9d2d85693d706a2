// Command podtable prints the pods a nodelet reports on its read-only
// port as a table, the way `kubectl get pods -o wide` would.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"

	v1 "k8s.io/api/core/v1"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:10255/pods", "nodelet's /pods endpoint")
	wait := flag.Duration("wait", 0, "wait up to this long for every pod to be Running")
	flag.Parse()
	deadline := time.Now().Add(*wait)
	for {
		pods, err := testbed.FetchPods(*url)
		if err == nil && (allRunning(pods) || time.Now().After(deadline)) {
			print(pods)
			return
		}
		if err != nil && time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "podtable:", err)
			os.Exit(1)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func allRunning(pods []v1.Pod) bool {
	for _, p := range pods {
		if p.Status.Phase != v1.PodRunning {
			return false
		}
	}
	return len(pods) > 0
}

func print(pods []v1.Pod) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tNAME\tREADY\tSTATUS\tRESTARTS\tIP")
	for _, p := range pods {
		ready, restarts := 0, int32(0)
		status := string(p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			if c.Ready {
				ready++
			}
			restarts += c.RestartCount
			if c.State.Waiting != nil && c.State.Waiting.Reason != "" {
				status = c.State.Waiting.Reason
			}
		}
		if p.Status.Reason != "" {
			status = p.Status.Reason
		}
		fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%d\t%s\n", p.Namespace, p.Name, ready, len(p.Spec.Containers), status, restarts,
			strings.TrimSpace(p.Status.PodIP))
	}
	w.Flush()
}
