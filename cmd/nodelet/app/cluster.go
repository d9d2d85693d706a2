package app

import (
	"context"
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/cmd/nodelet/options"
	"github.com/nodelet/nodelet/pkg/cluster/apiclient"
	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
	"github.com/nodelet/nodelet/pkg/cluster/standalone"
	"github.com/nodelet/nodelet/pkg/node/health"
	"github.com/nodelet/nodelet/pkg/node/journal"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/pods/podsync"
	"github.com/nodelet/nodelet/pkg/runtime/containeropts"
	"github.com/nodelet/nodelet/pkg/runtime/runtimeclass"
	"github.com/nodelet/nodelet/pkg/volumes/csi"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// apiClients builds the API clients from the node's credentials: one for
// everything but events, rate-limited by kubeAPIQPS/kubeAPIBurst, and one
// for events, rate-limited by eventRecordQPS/eventBurst, so a burst of
// events never delays a status update.
func apiClients(base *rest.Config, c *kubeletv1beta1.KubeletConfiguration) (client, events kubeclient.Interface, err error) {
	cfg := rest.CopyConfig(base)
	cfg.UserAgent = "nodelet/" + options.Version
	cfg.ContentType = c.ContentType
	cfg.QPS, cfg.Burst = float32(*c.KubeAPIQPS), int(c.KubeAPIBurst)
	if client, err = kubeclient.New(cfg); err != nil {
		return nil, nil, fmt.Errorf("API client: %w", err)
	}
	ecfg := rest.CopyConfig(cfg)
	ecfg.QPS, ecfg.Burst = float32(*c.EventRecordQPS), int(c.EventBurst)
	if events, err = kubeclient.New(ecfg); err != nil {
		return nil, nil, fmt.Errorf("API client for events: %w", err)
	}
	return client, events, nil
}

// clusterObjects is what pods read from the API server: configMaps,
// secrets and services for their environment and volumes, watched while
// a pod refers to them.
type clusterObjects interface {
	containeropts.ClusterObjects
	RegisterPod(pod *v1.Pod)
	UnregisterPod(pod *v1.Pod)
}

// clusterClients are the API server's clients the pods' sync needs; on a
// standalone node, standalone.API stands in for each.
type clusterClients struct {
	objects clusterObjects
	tokens  volume.Tokens
	claims  volume.Claims
	// csi publishes CSI volumes; nil standalone.
	csi volume.CSIVolumes
	// volumesInUse lists the attachable volumes mounted, for the Node's
	// status; nil standalone.
	volumesInUse func() []v1.UniqueVolumeName
	// csiStats measures CSI volumes for the stats summary; nil standalone.
	csiStats stats.CSIVolumeStats
	// csiDrivers take the CSI drivers the plugin watcher finds; nil
	// standalone.
	csiDrivers *csi.Registry
	mirrors    podsync.MirrorPods
	// classes name the runtime handlers of RuntimeClasses: the API
	// server's, or standalone those of --runtime-classes.
	classes    *runtimeclass.Classes
	components []component
}

func buildClusterClients(b *base) *clusterClients {
	if b.client == nil {
		none := standalone.API{}
		return &clusterClients{objects: none, tokens: none, claims: none, mirrors: none, classes: runtimeclass.Static(b.opts.RuntimeClasses)}
	}
	classes := runtimeclass.Watched(b.client)
	// A change to an object a pod refers to syncs the pod at once.
	api := apiclient.New(apiclient.Options{Client: b.client, NodeName: b.nodeName, OnChange: func(uids []types.UID) {
		for _, uid := range uids {
			b.workQueue.Enqueue(uid, 0)
		}
	}})
	drivers := csi.NewRegistry(csi.RegistryOptions{RootDir: b.opts.RootDir, Nodes: csi.APINodes{Client: b.client, NodeName: b.nodeName},
		Clock: b.clock, Timeout: b.cfg.RuntimeRequestTimeout.Duration})
	volumes := csi.NewMounter(csi.MounterOptions{RootDir: b.opts.RootDir, NodeName: b.nodeName, Drivers: drivers, API: journal.CSIAPI{API: api, J: b.journal},
		Timeout: b.cfg.RuntimeRequestTimeout.Duration, Clock: b.clock})
	return &clusterClients{objects: journal.Objects{APIObjects: api, J: b.journal}, tokens: journal.Tokens{TokenCreator: api, Journal: b.journal}, claims: journal.Claims{Claims: api, J: b.journal},
		csi: volumes, volumesInUse: volumes.VolumesInUse, csiStats: volumes, mirrors: api, csiDrivers: drivers, classes: classes,
		components: []component{{"API object watches", api.Run}, {"CSI driver registration", drivers.Run}, {"client certificate", b.credentials.Run},
			{"RuntimeClasses", classes.Run}}}
}

// reporterParts is the Node as the API server has it: registered,
// its status and lease kept up to date. Standalone, it is the Node
// nodelet measured.
type reporterParts struct {
	node func() *v1.Node
	// syncStatus writes the Node's status now if it changed; nil
	// standalone.
	syncStatus func(ctx context.Context)
	components []component
}

func buildReporter(b *base, node *nodeParts, health *health.Node, cl *clusterClients, res *resourceParts) *reporterParts {
	if b.client == nil {
		return &reporterParts{node: func() *v1.Node {
			n := *node.node
			n.Status.Allocatable = maps.Clone(n.Status.Allocatable)
			maps.Copy(n.Status.Allocatable, res.devices.AdmissionAllocatable())
			return &n
		}}
	}
	c := b.cfg
	reporter := nodestatus.NewReporter(nodestatus.ReporterOptions{
		Client: b.client, Node: node.node, Recorder: b.recorder, Clock: b.clock,
		StatusUpdateFrequency: c.NodeStatusUpdateFrequency.Duration,
		StatusReportFrequency: c.NodeStatusReportFrequency.Duration,
		LeaseDuration:         time.Duration(c.NodeLeaseDurationSeconds) * time.Second,
		Ready: func() error {
			return utilerrors.NewAggregate([]error{health.ReadyError(), b.shutdown.Err()})
		},
		Pressure:              node.pressure.Pressure,
		SkipRegistration:      !*c.RegisterNode,
		VolumesInUse:          cl.volumesInUse,
		ExternalCloudProvider: b.opts.ExternalCloudProvider,
		DeviceResources:       res.devices.Capacity, AdmissionDeviceResources: res.devices.AdmissionAllocatable,
		ResetExtendedResources: res.devices.CheckpointMissing,
	})
	// Admission sees the labels an administrator put on the Node, and the
	// resources nodelet measured.
	return &reporterParts{node: reporter.AdmissionNode, syncStatus: reporter.SyncStatus, components: []component{runs("node status reporter", reporter.Run)}}
}
