package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	containerdevents "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cm"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/container"
	"github.com/nodelet/nodelet/pkg/kubelet"
	"github.com/nodelet/nodelet/pkg/kuberuntime"
	"github.com/nodelet/nodelet/pkg/logs"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/nodestatus"
	"github.com/nodelet/nodelet/pkg/objects"
	"github.com/nodelet/nodelet/pkg/pleg"
	"github.com/nodelet/nodelet/pkg/podutil"
	"github.com/nodelet/nodelet/pkg/podworkers"
	"github.com/nodelet/nodelet/pkg/prober"
	"github.com/nodelet/nodelet/pkg/server"
	"github.com/nodelet/nodelet/pkg/stats"
	"github.com/nodelet/nodelet/pkg/status"
	"github.com/nodelet/nodelet/pkg/volume"
)

const (
	plegRelistPeriod = time.Second
	// syncBackOffPeriod is how long a pod waits after a failed sync.
	syncBackOffPeriod = 10 * time.Second
	dialTimeout       = 10 * time.Second
	// containerPollPeriod bounds how late a container exit is seen on
	// runtimes without an event stream.
	containerPollPeriod = 100 * time.Millisecond
	// watcherStuckAfter is how long the container event watcher may go
	// without a stream or a successful poll before the node is unhealthy.
	watcherStuckAfter = time.Minute
	// pressureCheckPeriod is how often the eviction signals are measured
	// (upstream's eviction monitoring interval).
	pressureCheckPeriod = 10 * time.Second
)

// NodeName is the name the node goes by: --hostname-override or the
// machine's hostname, lower-cased as the API requires.
func NodeName(override string) (string, error) {
	name := override
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("cannot determine the node name: %w", err)
		}
		name = h
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", fmt.Errorf("node name is empty")
	}
	return name, nil
}

// Run builds nodelet from its options and runs it until ctx ends.
// Stopping leaves every pod running: only deleting a pod stops it.
func Run(ctx context.Context, o *Options) error {
	c := &o.Config
	nodeName, err := NodeName(o.HostnameOverride)
	if err != nil {
		return err
	}
	// The metrics' running gauges read the runtime manager, built below.
	var runtime *kuberuntime.Manager
	promMetrics := metrics.New(func(ctx context.Context) ([]*container.Pod, error) { return runtime.GetPods(ctx) })
	conn, version, err := kuberuntime.Dial(ctx, c.ContainerRuntimeEndpoint, dialTimeout,
		grpc.WithChainUnaryInterceptor(promMetrics.UnaryClientInterceptor()))
	if err != nil {
		return err
	}
	defer conn.Close()
	klog.InfoS("Connected to the container runtime", "endpoint", c.ContainerRuntimeEndpoint,
		"runtime", version.RuntimeName, "version", version.RuntimeVersion, "criVersion", version.RuntimeApiVersion)
	for _, d := range []string{o.RootDir, c.PodLogsDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	hostIPs := nodeIPs()
	klog.InfoS("Starting nodelet", "node", nodeName, "hostIPs", hostIPs, "rootDir", o.RootDir, "staticPodPath", c.StaticPodPath)

	var client, eventClient kubernetes.Interface
	if o.Kubeconfig != "" {
		if client, eventClient, err = apiClients(o.Kubeconfig, c); err != nil {
			return err
		}
	}

	clk := clock.RealClock{}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartStructuredLogging(2)
	if eventClient != nil {
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: eventClient.CoreV1().Events("")})
	}
	// Events come from "kubelet", as upstream's do: alerting and tools
	// that select a node agent's events by source keep working.
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: nodeName})

	statusManager := status.New(clk)
	node, cgroups, err := setUpNode(o, nodeName, hostIPs)
	if err != nil {
		return err
	}
	node.Status.NodeInfo.ContainerRuntimeVersion = version.RuntimeName + "://" + version.RuntimeVersion
	node.Status.NodeInfo.KubeletVersion = Version
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = c.Port
	nodeFunc := func() *v1.Node { return node }
	runtimeService := runtimeapi.NewRuntimeServiceClient(conn)
	imageService := runtimeapi.NewImageServiceClient(conn)
	statsProvider := stats.NewProvider(stats.Options{
		NodeName: nodeName, RootDir: o.RootDir, PodLogsDir: c.PodLogsDir, Clock: clk,
		Runtime: struct {
			runtimeapi.RuntimeServiceClient
			runtimeapi.ImageServiceClient
		}{runtimeService, imageService},
	})
	pressure, err := pressureMonitor(c, statsProvider, clk)
	if err != nil {
		return err
	}
	var core *kubelet.Kubelet
	var reporter *nodestatus.Reporter
	workQueue := podworkers.NewWorkQueue(clk)
	containerOptions := kubelet.NewContainerOptions(o.RootDir, nodeName, hostIPs)
	volumeOptions := volume.Options{
		RootDir: o.RootDir, NodeName: nodeName, HostIPs: hostIPs, Recorder: recorder, Clock: clk,
		Allocatable: func() v1.ResourceList { return node.Status.Allocatable },
	}
	optionsConfig := kubelet.ContainerOptionsConfig{
		Allocatable: volumeOptions.Allocatable,
		Recorder:    recorder,
		DNS:         kubelet.DNS{ClusterDNS: c.ClusterDNS, ClusterDomain: c.ClusterDomain, ResolvConf: *c.ResolverConfig},
	}
	var mirrors kubelet.MirrorPods
	var secrets kubelet.SecretGetter
	var objs *objects.Manager
	if client != nil {
		reporter = nodestatus.NewReporter(nodestatus.ReporterOptions{
			Client: client, Node: node, Recorder: recorder, Clock: clk,
			StatusUpdateFrequency: c.NodeStatusUpdateFrequency.Duration,
			StatusReportFrequency: c.NodeStatusReportFrequency.Duration,
			LeaseDuration:         time.Duration(c.NodeLeaseDurationSeconds) * time.Second,
			WatchBackoff:          config.WatchBackoff(),
			// The core is built below, before the reporter runs.
			Ready:    func() error { return core.ReadyError() },
			Pressure: pressure.Pressure,
		})
		// Admission sees the labels an administrator put on the Node.
		nodeFunc = reporter.Node
		api := kubelet.NewAPIClient(client, nodeName)
		// A change to an object a pod refers to syncs the pod at once.
		objs = objects.NewManager(ctx, client, func(uids []types.UID) {
			for _, uid := range uids {
				workQueue.Enqueue(uid, 0)
			}
		})
		mirrors, secrets = api, objs
		volumeOptions.Objects, volumeOptions.Tokens, optionsConfig.Objects = objs, api, objs
	}
	volumes := volume.NewManager(volumeOptions)
	optionsConfig.Volumes = volumes
	containerOptions.Configure(optionsConfig)
	klog.InfoS("Node resources", "capacity", node.Status.Capacity, "allocatable", node.Status.Allocatable, "labels", node.Labels)
	var cgroupParent func(*v1.Pod) string
	if cgroups != nil {
		cgroupParent = cgroups.PodCgroup
	}
	probes := prober.New(prober.Options{Exec: runtimeService, Status: statusManager, Recorder: recorder, Clock: clk})
	runtime = kuberuntime.New(kuberuntime.Options{
		Runtime:        runtimeService,
		Images:         imageService,
		Helper:         containerOptions,
		Recorder:       recorder,
		Clock:          clk,
		RuntimeName:    version.RuntimeName,
		PodLogsDir:     c.PodLogsDir,
		RequestTimeout: c.RuntimeRequestTimeout.Duration,
		CgroupParent:   cgroupParent,
		Health:         probes,
		KeyringDir:     o.RootDir,
		MemoryCapacity: memoryCapacity(node),
		// Pulls are serialised unless told otherwise, as upstream does.
		MaxParallelPulls: maxParallelPulls(c),
		Pulls:            promMetrics,
	})
	gpleg := pleg.NewGeneric(runtime, pleg.NewCache(), plegRelistPeriod, clk)
	gpleg.ObserveRelists(promMetrics.ObserveRelist)
	// Relist as soon as a container changes, not only every second.
	watcherOptions := pleg.WatcherOptions{
		Runtime: runtimeService, Poll: containerPollPeriod, RequestTimeout: c.RuntimeRequestTimeout.Duration,
		StuckAfter: watcherStuckAfter, Clock: clk,
		// Exits nodelet caused are read by the worker that caused them.
		Notify: func(ids ...string) {
			if len(ids) == 0 {
				gpleg.Trigger()
			} else if ids = runtime.Unexpected(ids); len(ids) > 0 {
				gpleg.Trigger(ids...)
			}
		},
	}
	if version.RuntimeName == "containerd" {
		watcherOptions.Containerd = containerdevents.NewEventsClient(conn)
	}
	watcher := pleg.NewWatcher(watcherOptions)

	syncerOptions := kubelet.SyncerOptions{
		Runtime: runtime, Status: statusManager, RootDir: o.RootDir, HostIPs: hostIPs,
		Recorder: recorder, Clock: clk, CanRun: kubelet.SoftAdmissionChecks(), Probes: probes,
		// The core is built below; no sync runs before it exists.
		Network: func() error { return core.NetworkError() },
		Mirrors: mirrors, Secrets: secrets, Volumes: volumes,
	}
	if objs != nil {
		syncerOptions.Objects = objs
	}
	coreConfig := kubelet.Config{
		NodeName: nodeName, RootDir: o.RootDir, HostIPs: hostIPs,
		Node:                 nodeFunc,
		AllowedUnsafeSysctls: c.AllowedUnsafeSysctls,
		DeadContainersKept:   o.DeadContainersKept,
		Pressure:             pressure.Pressure,
		HealthChecks:         []kubelet.HealthCheck{{Name: "container event watcher", Check: watcher.Healthy}},
	}
	if cgroups != nil {
		// Only set when there are cgroups: a nil pointer in an interface
		// would not read as "none".
		syncerOptions.Cgroups, coreConfig.Cgroups = cgroups, cgroups
	}
	syncer := kubelet.NewPodSyncer(syncerOptions)
	workers := podworkers.New(podworkers.Options{
		Syncer: promMetrics.InstrumentSyncer(syncer, statusManager, clk), Status: gpleg, WorkQueue: workQueue, Clock: clk,
		ResyncInterval: c.SyncFrequency.Duration, BackOffPeriod: syncBackOffPeriod,
	})
	runtime.SetPodState(workers)

	podConfig := config.New(recorder, clk)
	core = kubelet.New(coreConfig, kubelet.Deps{
		Workers: workers, WorkQueue: workQueue, Runtime: runtime, PLEG: gpleg, Status: statusManager,
		Sources: config.NewSourcesReady(podConfig.Sources), Recorder: recorder, Clock: clk,
		Probes: probes, Mirrors: mirrors, Volumes: volumes,
	})

	if c.StaticPodPath != "" {
		podConfig.Register(podutil.FileSource)
		src := config.NewFileSource(c.StaticPodPath, nodeName, c.FileCheckFrequency.Duration, podConfig, recorder, clk)
		go src.Run(ctx)
	}
	if c.StaticPodURL != "" {
		podConfig.Register(podutil.HTTPSource)
		src := config.NewHTTPSource(c.StaticPodURL, http.Header(c.StaticPodURLHeader), nodeName, c.HTTPCheckFrequency.Duration, podConfig, recorder, clk)
		go src.Run(ctx)
	}
	if client != nil {
		podConfig.Register(podutil.APISource)
		go config.NewAPISource(client, nodeName, podConfig).Run(ctx)
		go reporter.Run(ctx)
		go status.NewAPISyncer(client, statusManager, apiPods{core, workers}, clk).Run(ctx)
		klog.InfoS("Cluster mode", "kubeconfig", o.Kubeconfig)
	}

	// A server that fails while running ends nodelet.
	serverErr := make(chan error, 2)
	forward := func(name string, errs <-chan error) {
		go func() {
			if err := <-errs; err != nil {
				serverErr <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	if c.ReadOnlyPort > 0 {
		addr, errs, err := server.Serve(ctx, net.JoinHostPort(c.Address, strconv.Itoa(int(c.ReadOnlyPort))), server.NewReadOnly(core, core.Healthz))
		if err != nil {
			return fmt.Errorf("read-only server: %w", err)
		}
		klog.InfoS("Serving the read-only API", "address", addr.String())
		forward("read-only server", errs)
	}
	if c.Port > 0 {
		errs, err := serveKubeletAPI(ctx, o, nodeName, hostIPs, client, server.NewKubelet(server.KubeletSources{
			Pods: core, Healthz: core.Healthz, Runtime: runtime, Metrics: promMetrics.Handler(),
			Stats: statsProvider, Profiling: c.EnableProfilingHandler == nil || *c.EnableProfilingHandler,
		}))
		if err != nil {
			return err
		}
		forward("kubelet API", errs)
	}

	go gpleg.Run(ctx)
	go pressure.Run(ctx)
	maxLogSize := resource.MustParse(c.ContainerLogMaxSize) // validated
	go logs.NewRotator(runtimeService, logs.Policy{
		MaxSize: maxLogSize.Value(), MaxFiles: int(*c.ContainerLogMaxFiles),
		Workers: int(*c.ContainerLogMaxWorkers), Interval: c.ContainerLogMonitorInterval.Duration,
	}, clk, c.RuntimeRequestTimeout.Duration).Run(ctx)
	go runtime.RunImageGC(ctx, kuberuntime.ImageGCPolicy{
		HighThresholdPercent: int(*c.ImageGCHighThresholdPercent), LowThresholdPercent: int(*c.ImageGCLowThresholdPercent),
		MinAge: c.ImageMinimumGCAge.Duration, Pinned: []string{o.PodInfraContainerImage},
	}, o.ImageGCPeriod)
	go watcher.Run(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		core.Run(ctx, podConfig.Updates())
	}()
	select {
	case <-loopDone:
	case err := <-serverErr:
		return err
	}
	<-loopDone
	klog.InfoS("nodelet stopped; pods keep running")
	return nil
}

// serveKubeletAPI serves the kubelet API over HTTPS on the node's port,
// behind the configured authentication and authorization.
func serveKubeletAPI(ctx context.Context, o *Options, nodeName string, hostIPs []string, client kubernetes.Interface, h http.Handler) (<-chan error, error) {
	c := &o.Config
	tlsConfig, err := server.ServingTLS(c.TLSCertFile, c.TLSPrivateKeyFile, filepath.Join(o.RootDir, "pki"), nodeName, hostIPs, c.Authentication.X509.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("kubelet API: %w", err)
	}
	h = server.WithAuth(h, server.AuthOptions{
		NodeName: nodeName, Anonymous: *c.Authentication.Anonymous.Enabled, Client: client,
		TokenWebhook: *c.Authentication.Webhook.Enabled, TokenCacheTTL: c.Authentication.Webhook.CacheTTL.Duration,
		AuthorizeWebhook: c.Authorization.Mode == kubeletv1beta1.KubeletAuthorizationModeWebhook,
		AuthorizedTTL:    c.Authorization.Webhook.CacheAuthorizedTTL.Duration,
		UnauthorizedTTL:  c.Authorization.Webhook.CacheUnauthorizedTTL.Duration,
	})
	addr, errs, err := server.ServeTLS(ctx, net.JoinHostPort(c.Address, strconv.Itoa(int(c.Port))), h, tlsConfig)
	if err != nil {
		return nil, fmt.Errorf("kubelet API: %w", err)
	}
	klog.InfoS("Serving the kubelet API", "address", addr.String(), "authorization", c.Authorization.Mode)
	return errs, nil
}

// apiPods is what the status syncer needs to know about pods: the core's
// desired pods and the workers' knowledge of what may still run.
type apiPods struct {
	*kubelet.Kubelet
	*podworkers.PodWorkers
}

func memoryCapacity(n *v1.Node) int64 {
	q := n.Status.Capacity[v1.ResourceMemory]
	return q.Value()
}

func maxParallelPulls(c *kubeletv1beta1.KubeletConfiguration) int {
	switch {
	case *c.SerializeImagePulls:
		return 1
	case c.MaxParallelImagePulls != nil:
		return int(*c.MaxParallelImagePulls)
	default:
		return 0
	}
}

// pressureMonitor watches the eviction signals against evictionHard
// (upstream's defaults when unset) for the node's pressure conditions.
func pressureMonitor(c *kubeletv1beta1.KubeletConfiguration, p *stats.Provider, clk clock.WithTicker) (*nodestatus.PressureMonitor, error) {
	evictionHard := c.EvictionHard
	if evictionHard == nil {
		evictionHard = nodestatus.DefaultEvictionHard
	}
	th, err := nodestatus.ParseThresholds(evictionHard)
	if err != nil {
		return nil, err
	}
	return nodestatus.NewPressureMonitor(nodestatus.PressureOptions{
		Signals: p.Signals, Thresholds: th, TransitionPeriod: c.EvictionPressureTransitionPeriod.Duration,
		Interval: pressureCheckPeriod, Clock: clk,
	}), nil
}

// setUpNode measures the machine, works out what pods may use (capacity
// minus systemReserved, kubeReserved and hard eviction thresholds) and,
// with cgroupsPerQOS, sets up the QoS cgroups, limited to capacity minus
// the reservations.
func setUpNode(o *Options, nodeName string, hostIPs []string) (*v1.Node, *cm.Manager, error) {
	c := &o.Config
	m, err := nodestatus.Measure(o.RootDir)
	if err != nil {
		return nil, nil, err
	}
	capacity := nodestatus.Capacity(m, int(c.MaxPods))
	evictionHard := c.EvictionHard
	if evictionHard == nil {
		evictionHard = nodestatus.DefaultEvictionHard
	}
	eviction, err := nodestatus.EvictionReserved(evictionHard, capacity)
	if err != nil {
		return nil, nil, err
	}
	reserved, err := nodestatus.ParseReserved(c.SystemReserved, c.KubeReserved)
	if err != nil {
		return nil, nil, err
	}
	enforced := nodestatus.Allocatable(capacity, reserved)
	for name, q := range eviction {
		cur := reserved[name]
		cur.Add(q)
		reserved[name] = cur
	}
	node := nodestatus.Node(nodestatus.Config{
		NodeName: nodeName, RootDir: o.RootDir, MaxPods: int(c.MaxPods), Reserved: reserved,
		Labels: o.NodeLabels, HostIPs: hostIPs,
	}, m)
	if c.CgroupsPerQOS != nil && !*c.CgroupsPerQOS {
		return node, nil, nil
	}
	var pidsLimit int64
	if c.PodPidsLimit != nil {
		pidsLimit = *c.PodPidsLimit
	}
	cgroups, err := cm.New(c.CgroupRoot, pidsLimit)
	if err != nil {
		return nil, nil, fmt.Errorf("cgroups: %w", err)
	}
	if err := cgroups.Setup(enforced); err != nil {
		return nil, nil, fmt.Errorf("setting up the QoS cgroups: %w", err)
	}
	return node, cgroups, nil
}

// nodeIPs finds the node's primary address: the one on the interface of
// the default route, else the first global unicast address.
func nodeIPs() []string {
	conn, err := net.Dial("udp", "192.0.2.1:9") // no packet is sent
	if err == nil {
		defer conn.Close()
		if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsLoopback() {
			return []string{a.IP.String()}
		}
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			return []string{n.IP.String()}
		}
	}
	return []string{"127.0.0.1"}
}
