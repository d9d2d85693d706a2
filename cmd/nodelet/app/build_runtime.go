package app

import (
	"context"
	"path/filepath"
	"time"

	containerdevents "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/journal"
	"github.com/nodelet/nodelet/pkg/observe/metrics"
	"github.com/nodelet/nodelet/pkg/pods/pleg"
	"github.com/nodelet/nodelet/pkg/pods/prober"
	"github.com/nodelet/nodelet/pkg/runtime/containeropts"
	"github.com/nodelet/nodelet/pkg/runtime/credentialprovider"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
	"github.com/nodelet/nodelet/pkg/runtime/logs"
	"github.com/nodelet/nodelet/pkg/runtime/runtimegate"
	"github.com/nodelet/nodelet/pkg/runtime/userns"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

const (
	dialTimeout = 10 * time.Second
	// containerPollPeriod bounds how late a container exit is seen on
	// runtimes without an event stream.
	containerPollPeriod = 100 * time.Millisecond
	// watcherStuckAfter is how long the container event watcher may go
	// without a stream or a successful poll before the node is unhealthy.
	watcherStuckAfter = time.Minute
)

// runtimeConn is the connection to the container runtime, and the
// metrics that instrument it.
type runtimeConn struct {
	conn *grpc.ClientConn
	// imagesConn is the image service's own connection
	// (imageServiceEndpoint), nil when it is the runtime's.
	imagesConn *grpc.ClientConn
	version    *runtimeapi.VersionResponse
	runtime    runtimeapi.RuntimeServiceClient
	images     runtimeapi.ImageServiceClient
	metrics    *metrics.Metrics
}

func dialRuntime(ctx context.Context, b *base) (*runtimeConn, error) {
	m := b.metrics
	conn, version, err := kuberuntime.Dial(ctx, b.cfg.ContainerRuntimeEndpoint, dialTimeout,
		grpc.WithChainUnaryInterceptor(m.UnaryClientInterceptor(), b.tracer.UnaryClientInterceptor()))
	if err != nil {
		return nil, err
	}
	klog.InfoS("Connected to the container runtime", "endpoint", b.cfg.ContainerRuntimeEndpoint,
		"runtime", version.RuntimeName, "version", version.RuntimeVersion, "criVersion", version.RuntimeApiVersion)
	rc := &runtimeConn{conn: conn, version: version, metrics: m,
		runtime: runtimeapi.NewRuntimeServiceClient(conn), images: runtimeapi.NewImageServiceClient(conn)}
	if e := b.cfg.ImageServiceEndpoint; e != "" && e != b.cfg.ContainerRuntimeEndpoint {
		ic, err := kuberuntime.DialImages(ctx, e, dialTimeout,
			grpc.WithChainUnaryInterceptor(m.UnaryClientInterceptor(), b.tracer.UnaryClientInterceptor()))
		if err != nil {
			conn.Close()
			return nil, err
		}
		klog.InfoS("Connected to the image service", "endpoint", e)
		rc.imagesConn, rc.images = ic, runtimeapi.NewImageServiceClient(ic)
	}
	return rc, nil
}

// Close closes the runtime's connections.
func (rc *runtimeConn) Close() {
	rc.conn.Close()
	if rc.imagesConn != nil {
		rc.imagesConn.Close()
	}
}

// runtimeParts is the runtime side of a node: the runtime manager and
// what watches it, the volumes and options its containers get, and the
// prober.
type runtimeParts struct {
	manager    *kuberuntime.Manager
	pleg       *pleg.Generic
	watcher    *pleg.Watcher
	probes     *prober.Manager
	volumes    *volume.Manager
	metrics    *metrics.Metrics
	imageGC    *images.GC
	userns     *userns.Allocator
	components []component
}

func buildRuntime(b *base, rt *runtimeConn, node *nodeParts, cl *clusterClients, res *resourceParts) (*runtimeParts, error) {
	c := b.cfg
	usernsAllocator, err := userns.New(userns.Options{RootDir: b.opts.RootDir, MaxPods: int(c.MaxPods), IDsPerPod: idsPerPod(c)})
	if err != nil {
		return nil, err
	}
	verify, err := images.NewVerifyPolicy(string(c.ImagePullCredentialsVerificationPolicy), c.PreloadedImagesVerificationAllowlist)
	if err != nil {
		return nil, err
	}
	imageVolumes := kuberuntime.ImageVolumeSupport(rt.version)
	volumes := volume.NewManager(volume.Options{
		RootDir: b.opts.RootDir, NodeName: b.nodeName, HostIPs: b.hostIPs, Recorder: b.recorder, Clock: b.clock,
		Objects: cl.objects, Tokens: cl.tokens, Claims: cl.claims, CSI: cl.csi, Node: func() *v1.Node { return node.node }, Allocatable: node.allocatable,
		ImageVolumes: func() error { return imageVolumes }, Steps: b.timelines,
	})
	options := containeropts.New(containeropts.Options{
		RootDir: b.opts.RootDir, NodeName: b.nodeName, HostIPs: b.hostIPs, Volumes: volumes, Objects: cl.objects,
		DNS:         containeropts.DNS{ClusterDNS: c.ClusterDNS, ClusterDomain: c.ClusterDomain, ResolvConf: *c.ResolverConfig},
		Allocatable: node.allocatable, Recorder: b.recorder,
	})
	probes := prober.New(prober.Options{Exec: rt.runtime, Status: b.status, Recorder: b.recorder, Clock: b.clock, Steps: b.timelines,
		Observer: rt.metrics.Probes(), Restored: journal.RestoredProbes(b.journalState), Save: b.journal.SaveProbe})
	var plugins images.CredentialPlugins
	if ps := b.opts.CredentialProviders; len(ps) > 0 {
		p := credentialprovider.New(credentialprovider.Options{Providers: ps, PluginDir: b.opts.CredentialProviderBinDir, Clock: b.clock})
		b.metrics.Register(p.Collectors()...)
		plugins = p
		klog.InfoS("Image credential provider plugins", "count", len(ps), "binDir", b.opts.CredentialProviderBinDir)
	}
	starts := runtimegate.New(runtimegate.Options{Name: "start", Clock: b.clock})
	stops := runtimegate.New(runtimegate.Options{Name: "stop", Clock: b.clock})
	b.metrics.Register(starts.Collector(), stops.Collector())
	puller := images.NewPuller(images.PullerOptions{
		Images: rt.images, Recorder: b.recorder, Clock: b.clock, Timeout: c.RuntimeRequestTimeout.Duration,
		// Pulls are serialised unless told otherwise, as upstream does.
		MaxParallel: maxParallelPulls(c), KeyringDir: b.opts.RootDir, Observer: rt.metrics, Plugins: plugins,
		Records: images.NewPullRecords(b.opts.RootDir, b.clock.Now), Verify: verify,
	})
	manager := kuberuntime.New(kuberuntime.Options{
		Runtime: rt.runtime, Images: puller, Helper: options, Recorder: b.recorder, Clock: b.clock,
		RuntimeName: rt.version.RuntimeName, PodLogsDir: c.PodLogsDir, LegacyLogsDir: kuberuntime.LegacyContainerLogsDir, RequestTimeout: c.RuntimeRequestTimeout.Duration,
		CrashBackOffMax: c.CrashLoopBackOff.MaxContainerRestartPeriod.Duration,
		CgroupParent:    node.cgroups.PodCgroup, Health: probes, MemoryCapacity: node.memoryCapacity(),
		NoCPUQuota: !*c.CPUCFSQuota, Steps: b.timelines, Resources: b.allocations, PodCgroup: node.cgroups.EnsureExists,
		Security:       kuberuntime.Security{SeccompDefault: ptr.Deref(c.SeccompDefault, false), SeccompRoot: filepath.Join(b.opts.RootDir, "seccomp")},
		UserNamespaces: usernsAllocator,
		ContainerHooks: res.hooks, Starts: starts, Stops: stops, RuntimeClasses: cl.classes,
	})
	gpleg := pleg.NewGeneric(pleg.GenericOptions{Runtime: manager, Period: b.opts.PLEGRelistPeriod, Clock: b.clock, ObserveRelist: rt.metrics.ObserveRelist})
	watcher := containerWatcher(b, rt, manager, gpleg)
	maxLogSize := resource.MustParse(c.ContainerLogMaxSize) // validated
	rotator := logs.NewRotator(rt.runtime, logs.Policy{
		MaxSize: maxLogSize.Value(), MaxFiles: int(*c.ContainerLogMaxFiles),
		Workers: int(*c.ContainerLogMaxWorkers), Interval: c.ContainerLogMonitorInterval.Duration,
	}, b.clock, c.RuntimeRequestTimeout.Duration)
	imageGC := images.NewGC(images.GCOptions{
		Runtime: struct {
			runtimeapi.ImageServiceClient
			runtimeapi.RuntimeServiceClient
		}{rt.images, rt.runtime},
		Policy: images.GCPolicy{
			HighThresholdPercent: int(*c.ImageGCHighThresholdPercent), LowThresholdPercent: int(*c.ImageGCLowThresholdPercent),
			MinAge: c.ImageMinimumGCAge.Duration, Pinned: []string{b.opts.PodInfraContainerImage},
		},
		Period: b.opts.ImageGCPeriod, Timeout: c.RuntimeRequestTimeout.Duration, Clock: b.clock,
	})
	return &runtimeParts{
		manager: manager, pleg: gpleg, watcher: watcher, probes: probes, volumes: volumes, metrics: rt.metrics, imageGC: imageGC, userns: usernsAllocator,
		components: []component{
			runs("pleg", gpleg.Run),
			{"probes", probes.Run},
			runs("container event watcher", watcher.Run),
			runs("log rotation", rotator.Run),
			runs("image garbage collection", imageGC.Run),
		},
	}, nil
}

// idsPerPod is the length of each pod's user namespace range (0: the
// default).
func idsPerPod(c *kubeletv1beta1.KubeletConfiguration) uint32 {
	if c.UserNamespaces == nil || c.UserNamespaces.IDsPerPod == nil {
		return 0
	}
	return uint32(*c.UserNamespaces.IDsPerPod)
}

// containerWatcher relists as soon as a container changes, not only every
// second. Exits nodelet caused are read by the worker that caused them.
func containerWatcher(b *base, rt *runtimeConn, manager *kuberuntime.Manager, gpleg *pleg.Generic) *pleg.Watcher {
	o := pleg.WatcherOptions{
		Runtime: rt.runtime, Poll: containerPollPeriod, RequestTimeout: b.cfg.RuntimeRequestTimeout.Duration,
		StuckAfter: watcherStuckAfter, Clock: b.clock, StreamBroke: rt.metrics.EventStreamBroke,
		Notify: func(ids ...string) {
			if len(ids) == 0 {
				gpleg.Trigger()
			} else if ids = manager.Unexpected(ids); len(ids) > 0 {
				gpleg.Trigger(ids...)
			}
		},
	}
	if rt.version.RuntimeName == "containerd" {
		o.Containerd = containerdevents.NewEventsClient(rt.conn)
	}
	return pleg.NewWatcher(o)
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
