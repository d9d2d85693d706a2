//go:build integration

// Package nodeconformance runs upstream's node conformance suite (the
// [NodeConformance] specs of k8s.io/kubernetes/test/e2e_node, built by
// hack/nodeconformance/build.sh) against a node: nodelet, or the upstream
// kubelet v1.37.2 in the same environment, whose result is the bar.
//
// The environment is the suite's own: its API server, etcd and namespace
// controller (started by the suite, as in upstream's node conformance
// image), the suite's kubelet settings
// (test/e2e_node/jenkins/default-kubelet-config.yaml, with the overrides
// upstream's launcher applies), root directory /var/lib/kubelet, and the
// suite's images under their upstream names, served by an in-process
// registry that the test's containerd uses as the mirror of
// registry.k8s.io (no registry is reachable here).
//
// Two modes:
//   - conformance (the default): the suite runs with --conformance=true,
//     starting only its services; this test starts the agent against
//     them, as a node conformance run does.
//   - harness: the suite's own launcher (--start-services) starts the
//     agent as it starts the kubelet (flags, --config-dir, kubeletCgroups,
//     systemCgroups, --runtime-cgroups), from a directory where nodelet
//     is named kubelet.
//
// make test runs the subset in testdata/subset.txt; make
// test-node-conformance runs every selected spec.
package nodeconformance

import (
	"flag"
	"os"
	"testing"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	agentFlag = flag.String("conformance.agent", "nodelet", "the node agent under test: nodelet, or upstream (the upstream kubelet v1.37.2)")
	modeFlag  = flag.String("conformance.mode", "conformance", "conformance (the suite starts its services, this test the agent) or harness (the suite's launcher starts the agent)")
	allFlag   = flag.Bool("conformance.all", false, "run every [NodeConformance] spec outside [Serial], [Slow], [Disruptive] and [Flaky], not only testdata/subset.txt")
	nodesFlag = flag.Int("conformance.nodes", 8, "ginkgo's parallel processes (upstream's node e2e CI runs 8)")
	focusFlag = flag.String("conformance.focus", "", "a regular expression narrowing the specs further (to run one while fixing it)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	testbed.RemoveBuilt()
	os.Exit(code)
}
