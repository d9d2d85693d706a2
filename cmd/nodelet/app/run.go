package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cmd/nodelet/options"
	"github.com/nodelet/nodelet/pkg/cluster/certificates"
	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
	"github.com/nodelet/nodelet/pkg/infra/selftrim"
	"github.com/nodelet/nodelet/pkg/infra/timerslack"
	"github.com/nodelet/nodelet/pkg/node/journal"
	"github.com/nodelet/nodelet/pkg/node/nodeshutdown"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/observe/metrics"
	"github.com/nodelet/nodelet/pkg/observe/timeline"
	"github.com/nodelet/nodelet/pkg/observe/tracing"
	"github.com/nodelet/nodelet/pkg/pods/allocation"
	"github.com/nodelet/nodelet/pkg/pods/poddirs"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// base is what every subsystem is built from: the configuration, the
// node's identity, the clock, the event recorder and (in cluster mode)
// the API client.
type base struct {
	opts     *options.Options
	cfg      *kubeletv1beta1.KubeletConfiguration
	nodeName string
	hostIPs  []string
	clock    clock.WithTicker
	recorder record.EventRecorder
	// client is nil on a standalone node.
	client kubeclient.Interface
	// credentials are the node's API credentials, renewed as they run
	// out; nil on a standalone node.
	credentials *certificates.Client
	// metrics are nodelet's Prometheus metrics.
	metrics *metrics.Metrics
	// workQueue is where a pod waits for its next sync; objects a pod
	// refers to enqueue it when they change.
	workQueue *podworkers.WorkQueue
	// status holds the pods' API statuses.
	status *podstatus.Manager
	// shutdown says whether the node is shutting down.
	shutdown *nodeshutdown.State
	// timelines keeps each pod's lifecycle steps; recorder feeds it
	// every pod event. tracer makes traces of them (when configured).
	timelines *timeline.Recorder
	tracer    *tracing.Tracer
	// allocations keeps what each pod's containers were granted and run
	// with, for in-place resize.
	allocations *allocation.Store
	// journal keeps what nodelet must not forget across a restart, and
	// journalState is what it held at the start.
	journal      *journal.Journal
	journalState *journal.State
}

// allocationsFile, in the root directory, keeps what each pod's
// containers were granted (not upstream's checkpoint files, whose format
// differs).
const allocationsFile = "nodelet_allocations.json"

// A pod's timeline keeps at most timelineMaxSteps steps; the timelines of
// the last timelineKeepFinished finished pods stay readable, or of the
// last maxPods if that is more (keepFinished).
const (
	timelineMaxSteps     = 256
	timelineKeepFinished = 100
)

// keepFinished is how many finished pods' timelines stay readable: at
// least a full node's pods, so that after a node drains, or a burst of
// deletions, every pod's end can still be read.
func keepFinished(c *kubeletv1beta1.KubeletConfiguration) int {
	return max(timelineKeepFinished, int(c.MaxPods))
}

// Run builds nodelet from its options and runs it until ctx ends. Each
// subsystem's builder returns finished components; one group runs them
// all, and the first to fail stops the others. Stopping leaves every pod
// running: only deleting a pod, or a node shutdown announced by
// systemd-logind (with a shutdown grace period), stops pods.
func Run(ctx context.Context, o *options.Options) error {
	widenTimerSlack() // first: the threads started later inherit it
	b, stopEvents, err := newBase(ctx, o)
	if err != nil {
		return err
	}
	defer stopEvents()
	rt, err := dialRuntime(ctx, b)
	if err != nil {
		return err
	}
	defer rt.Close()
	// Once the runtime answers, as upstream's kubelet does it: a start
	// that fails before leaves no mount behind.
	if err := poddirs.MakeRShared(o.RootDir); err != nil {
		return fmt.Errorf("configuring the root directory %s: %w", o.RootDir, err)
	}
	cl := buildClusterClients(b)
	node, err := buildNode(b, rt, cl)
	if err != nil {
		return err
	}
	res, err := buildResources(b, rt, node, cl)
	if err != nil {
		return err
	}
	runtime, err := buildRuntime(b, rt, node, cl, res)
	if err != nil {
		return err
	}
	health := buildHealth(b, runtime)
	reporter := buildReporter(b, node, health, cl, res)
	core := buildCore(b, runtime, node, cl, health, reporter, res)
	servers, err := buildServers(b, rt, node, runtime, core, health, reporter, res)
	if err != nil {
		return err
	}
	shutdown := buildShutdown(b, core, reporter)
	eviction, err := buildEviction(b, runtime, node, core)
	if err != nil {
		return err
	}
	// After start-up, and after each burst of work, the binary's pages
	// that only it used are given back (see package selftrim).
	trimmer := selftrim.New(selftrim.Options{StartedUp: core.sourcesReady, Clock: b.clock})
	klog.InfoS("Starting nodelet", "node", b.nodeName, "hostIPs", b.hostIPs, "rootDir", o.RootDir, "staticPodPath", b.cfg.StaticPodPath, "cluster", b.client != nil)
	err = supervise(ctx, concat(node.components, res.components, runtime.components, []component{{"health", health.Run}, {"tracing", b.tracer.Run}, runs("working set", trimmer.Run)},
		cl.components, reporter.components, core.components, servers, shutdown, eviction))
	klog.InfoS("nodelet stopped; pods keep running", "err", err)
	return err
}

// newBase works out the node's identity, makes nodelet's directories and
// starts the event broadcaster (to the API server in cluster mode).
func newBase(ctx context.Context, o *options.Options) (*base, func(), error) {
	c := &o.Config
	nodeName, err := options.NodeName(o.HostnameOverride)
	if err != nil {
		return nil, nil, err
	}
	for d, mode := range map[string]os.FileMode{o.RootDir: 0o750, c.PodLogsDir: 0o750, kuberuntime.LegacyContainerLogsDir: 0o755} {
		if err := os.MkdirAll(d, mode); err != nil {
			return nil, nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	hostIPs, err := nodestatus.NodeIPs(o.NodeIPs)
	if err != nil {
		return nil, nil, err
	}
	b := &base{opts: o, cfg: c, nodeName: nodeName, hostIPs: hostIPs, clock: clock.RealClock{}, shutdown: &nodeshutdown.State{}, metrics: metrics.New()}
	if b.allocations, err = allocation.Open(filepath.Join(o.RootDir, allocationsFile)); err != nil {
		return nil, nil, err
	}
	// Events from "kubelet", as upstream's are: alerting and tools that
	// select a node agent's events by source keep working. They wait in
	// the broadcaster until the API sink is attached.
	broadcaster := kubeclient.NewEventBroadcaster(ctx, int(c.MaxPods))
	broadcaster.StartStructuredLogging(2)
	nodeEvents := broadcaster.NewRecorder(kubeclient.Scheme, v1.EventSource{Component: "kubelet", Host: nodeName})
	if o.Kubeconfig != "" {
		if err := connectCluster(ctx, b, nodeEvents, broadcaster); err != nil {
			broadcaster.Shutdown()
			return nil, nil, err
		}
	}
	if err := openJournal(b); err != nil {
		broadcaster.Shutdown()
		return nil, nil, err
	}
	b.workQueue, b.status = podworkers.NewWorkQueue(b.clock), podstatus.New(b.clock, podstatus.WithJournal(b.journal))
	if b.tracer, err = tracing.New(ctx, tracing.Options{Config: c.Tracing, NodeName: nodeName, Version: options.Version, Clock: b.clock}); err != nil {
		broadcaster.Shutdown()
		return nil, nil, err
	}
	b.timelines = timeline.New(timeline.Options{Clock: b.clock, MaxSteps: timelineMaxSteps, KeepFinished: keepFinished(c),
		Finished: b.journal.PutTimeline, Observe: b.tracer.Observe})
	b.recorder = b.timelines.Events(nodeEvents)
	restoreFromJournal(b)
	return b, broadcaster.Shutdown, nil
}

// connectCluster obtains the node's API credentials (bootstrapping its
// client certificate if it must) and builds the API clients; events go to
// the API server from then on.
func connectCluster(ctx context.Context, b *base, events record.EventRecorder, broadcaster record.EventBroadcaster) error {
	o, c := b.opts, b.cfg
	creds, err := certificates.NewClient(ctx, certificates.ClientOptions{
		Kubeconfig: o.Kubeconfig, BootstrapKubeconfig: o.BootstrapKubeconfig, CertDir: o.CertDir, NodeName: b.nodeName,
		Rotate: c.RotateCertificates, Recorder: events, Clock: b.clock,
	})
	if err != nil {
		return err
	}
	var eventClient kubeclient.Interface
	if b.client, eventClient, err = apiClients(creds.Config(), c); err != nil {
		return err
	}
	b.credentials = creds
	b.metrics.Register(creds.Collectors()...)
	broadcaster.StartRecordingToSink(kubeclient.EventSink{Client: eventClient})
	klog.InfoS("Cluster mode", "kubeconfig", o.Kubeconfig, "bootstrapKubeconfig", o.BootstrapKubeconfig,
		"rotateCertificates", c.RotateCertificates, "certDir", o.CertDir)
	return nil
}

// timerSlack is how late the kernel may wake nodelet's threads, to group
// their wake-ups (package timerslack): the Go runtime's monitor wakes
// then about once a millisecond while anything runs, not every 70 µs.
const timerSlack = time.Millisecond

func widenTimerSlack() {
	res, err := timerslack.Widen(timerSlack)
	switch {
	case err != nil:
		klog.InfoS("Timer slack left at the kernel's default", "err", err)
	case res.Kept != 0:
		klog.V(2).InfoS("Timer slack set by the operator, kept", "slack", res.Kept)
	default:
		klog.V(2).InfoS("Timer slack widened", "slack", timerSlack, "threads", res.Threads)
	}
}
