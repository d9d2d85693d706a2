package app

import (
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/node/health"
	"github.com/nodelet/nodelet/pkg/node/nodeshutdown"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/pods/kubelet"
	"github.com/nodelet/nodelet/pkg/pods/podsources"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podsync"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// syncBackOffPeriod is how long a pod waits after a failed sync.
const syncBackOffPeriod = 10 * time.Second

// buildHealth gathers the node's health: the runtime's status check, the
// PLEG and the container event watcher.
func buildHealth(b *base, runtime *runtimeParts) *health.Node {
	return health.New(health.Options{
		Clock: b.clock, Runtime: runtime.manager.RuntimeHealth, PLEG: runtime.pleg.Healthy,
		Checks:          []health.Check{{Name: "container event watcher", Check: runtime.watcher.Healthy}},
		ObserveSyncLoop: runtime.metrics.ObserveSyncLoop,
	})
}

// coreParts is the pod pipeline: the sources and their merge, the sync
// loop, the pod workers and the sync scripts they run, and the status
// syncer that reports back.
type coreParts struct {
	kubelet *kubelet.Kubelet
	workers *podworkers.PodWorkers
	// statusSyncer writes the pods' statuses to the API; nil standalone.
	statusSyncer *podstatus.APISyncer
	// sourcesReady says whether every pod source has delivered and its
	// pods were admitted.
	sourcesReady func() bool
	components   []component
}

func buildCore(b *base, runtime *runtimeParts, node *nodeParts, cl *clusterClients, health *health.Node, reporter *reporterParts, res *resourceParts) *coreParts {
	syncer := podsync.NewPodSyncer(podsync.SyncerOptions{
		Runtime: runtime.manager, Reads: runtime.pleg, Status: b.status, RootDir: b.opts.RootDir, HostIPs: b.hostIPs,
		Recorder: b.recorder, Clock: b.clock, Probes: runtime.probes,
		Network: health.NetworkError, Mirrors: cl.mirrors, Secrets: cl.objects,
		Cgroups: node.cgroups, Resources: b.allocations, Features: kuberuntime.PodFeatures(runtime.manager.Features, cl.classes),
		Hooks: syncHooks(b, runtime, cl, res),
	})
	workers := podworkers.New(podworkers.Options{
		Syncer: syncer, Status: runtime.pleg, WorkQueue: b.workQueue,
		// The timeline first: its sync step spans the others' work.
		Observers: []instrument.SyncObserver{b.timelines.Syncs(b.status), runtime.metrics.Syncs(b.status, b.clock), b.tracer.Syncs()},
		Clock:     b.clock, ResyncInterval: b.cfg.SyncFrequency.Duration, BackOffPeriod: syncBackOffPeriod, Recorder: b.recorder,
	})
	podConfig := podsources.New(b.recorder, b.clock, podsources.WithSteps(b.timelines), podsources.WithJournal(b.journal))
	sources := podSources(b, podConfig, res)
	ready := podsources.NewSourcesReady(podConfig.Sources)
	core := kubelet.New(kubelet.Config{
		NodeName: b.nodeName, RootDir: b.opts.RootDir, HostIPs: b.hostIPs, DeadContainersKept: b.opts.DeadContainersKept,
		Cgroups: node.cgroups, Release: res.release,
		Admitter: admission.New(admission.Options{Node: reporter.node, Decisions: b.journal, Handlers: admissionHandlers(b, runtime, node, cl, res)}),
		Resizer:  admission.NewResizer(admission.ResizerOptions{Node: reporter.node, Allocations: b.allocations, Checks: res.resizeChecks}),
	}, kubelet.Deps{
		Workers: workers, WorkQueue: b.workQueue, Runtime: runtime.manager, GC: runtime.manager.ContainerGC(), PLEG: runtime.pleg, Status: b.status,
		Sources: ready, Updates: podConfig.Updates(), Health: health,
		Recorder: b.recorder, Clock: b.clock, Probes: runtime.probes, Mirrors: cl.mirrors, Volumes: runtime.volumes,
		PodDirRemoved: []func(types.UID){runtime.userns.Release},
	})
	parts := &coreParts{kubelet: core, workers: workers, sourcesReady: ready.AllReady,
		components: concat(sources, journalComponents(b, podConfig), []component{{"sync loop", core.Run}, {"pod workers", workers.Run}})}
	if b.client != nil {
		parts.statusSyncer = podstatus.NewAPISyncer(podstatus.APISyncerOptions{
			Client: b.client, Status: b.status, Pods: apiPods{core.View(), workers}, Clock: b.clock, Steps: b.timelines,
		})
		parts.components = append(parts.components, runs("pod status syncer", parts.statusSyncer.Run))
	}
	return parts
}

// syncHooks take part in each pod's life, in this order (podsync.Hook):
// the grant is written before the volumes are set up; the volumes are
// unmounted before the objects they were made from stop being watched.
func syncHooks(b *base, runtime *runtimeParts, cl *clusterClients, res *resourceParts) []podsync.Hook {
	hooks := []podsync.Hook{podsync.GrantsHook(b.allocations), podsync.VolumesHook(runtime.volumes), podsync.ClaimsHook(res.claims)}
	if b.client != nil {
		hooks = append(hooks, podsync.ObjectsHook(cl.objects))
	}
	return hooks
}

// admissionHandlers are the questions a new pod must pass, in the order
// they are asked; the first refusal is the pod's. The resource managers
// place and allocate after the checks before them, and before the node's
// capacity is checked; a pod refused after its first containers were
// allocated gives them back at the next housekeeping (refused, it is not
// active).
func admissionHandlers(b *base, runtime *runtimeParts, node *nodeParts, cl *clusterClients, res *resourceParts) []admission.Handler {
	return []admission.Handler{
		b.shutdown,
		kuberuntime.FeatureAdmission(runtime.manager.Features, cl.classes),
		res.topology,
		admission.Fields,
		admission.Pressure(node.pressure.Pressure),
		admission.Sysctls(b.cfg.AllowedUnsafeSysctls),
		admission.OS,
		admission.NodeName,
		admission.Affinity,
		admission.Taints,
		admission.HostPorts,
		admission.Resources,
		admission.AppArmor(admission.AppArmorEnabled()),
	}
}

// podSources registers the configured pod sources with the merge: a
// source counts as ready only once it has delivered, so none may be
// registered that never runs.
func podSources(b *base, podConfig *podsources.PodConfig, res *resourceParts) []component {
	c := b.cfg
	var out []component
	static := podsources.Static{NodeName: b.nodeName, Running: res.runningPods}
	if c.StaticPodPath != "" {
		podConfig.Register(podutil.FileSource)
		src := podsources.NewFileSource(c.StaticPodPath, static, c.FileCheckFrequency.Duration, podConfig, b.recorder, b.clock)
		out = append(out, runs("static pod files", src.Run))
	}
	if c.StaticPodURL != "" {
		podConfig.Register(podutil.HTTPSource)
		src := podsources.NewHTTPSource(c.StaticPodURL, http.Header(c.StaticPodURLHeader), static, c.HTTPCheckFrequency.Duration, podConfig, b.recorder, b.clock)
		out = append(out, runs("static pod URL", src.Run))
	}
	if b.client != nil {
		podConfig.Register(podutil.APISource)
		src := podsources.NewAPISource(b.client, b.nodeName, podConfig)
		out = append(out, runs("API pod source", src.Run))
	}
	return out
}

// apiPods is what the status syncer needs to know about pods: the core's
// desired pods and the workers' knowledge of what may still run.
type apiPods struct {
	*kubelet.PodView
	*podworkers.PodWorkers
}

// buildShutdown is the graceful node shutdown, with a shutdown grace
// period: when systemd-logind announces a shutdown, the node goes
// NotReady, then the pods are stopped by priority and their statuses
// written, before logind goes on.
func buildShutdown(b *base, core *coreParts, reporter *reporterParts) []component {
	groups := nodeshutdown.Groups(b.cfg)
	if len(groups) == 0 {
		return nil
	}
	o := nodeshutdown.Options{
		Groups: groups, State: b.shutdown, Logind: nodeshutdown.SystemLogind{}, Pods: core.kubelet.View(), Killer: core.kubelet, PodsKnown: core.sourcesReady,
		NodeName: b.nodeName, Recorder: b.recorder, Clock: b.clock,
	}
	if reporter.syncStatus != nil {
		o.OnStart = append(o.OnStart, reporter.syncStatus)
	}
	if core.statusSyncer != nil {
		o.OnDone = append(o.OnDone, core.statusSyncer.Flush)
	}
	return []component{runs("node shutdown", nodeshutdown.New(o).Run)}
}
