package kubeletconfig

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Defaults nodelet applies to fields left unset. The v1beta1 package has
// no defaulting code of its own; these are upstream's defaults. As
// upstream's, the read-only port is off unless asked for: it serves every
// pod's spec without authentication.
const (
	DefaultRootDir         = "/var/lib/kubelet"
	DefaultRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	DefaultPodLogsDir      = "/var/log/pods"
	DefaultPort            = 10250
	DefaultMaxPods         = 110
	DefaultSandboxImage    = "registry.k8s.io/pause:3.10"
)

// SetDefaults fills in upstream's v1beta1 defaults. As upstream's
// defaulting does, a zero value (kubeadm writes "0s" durations, for one)
// means "the default".
func SetDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	if c.ContainerRuntimeEndpoint == "" {
		c.ContainerRuntimeEndpoint = DefaultRuntimeEndpoint
	}
	if c.SyncFrequency.Duration == 0 {
		c.SyncFrequency.Duration = time.Minute
	}
	if c.FileCheckFrequency.Duration == 0 {
		c.FileCheckFrequency.Duration = 20 * time.Second
	}
	if c.HTTPCheckFrequency.Duration == 0 {
		c.HTTPCheckFrequency.Duration = 20 * time.Second
	}
	if c.Address == "" {
		c.Address = "0.0.0.0"
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.MaxPods == 0 {
		c.MaxPods = DefaultMaxPods
	}
	if c.CgroupDriver == "" {
		c.CgroupDriver = "cgroupfs"
	}
	if c.ResolverConfig == nil {
		c.ResolverConfig = new("/etc/resolv.conf")
	}
	if c.PodLogsDir == "" {
		c.PodLogsDir = DefaultPodLogsDir
	}
	// Container log rotation, as upstream's defaults.
	if c.ContainerLogMaxSize == "" {
		c.ContainerLogMaxSize = "10Mi"
	}
	if c.ContainerLogMaxFiles == nil {
		c.ContainerLogMaxFiles = new(int32(5))
	}
	if c.ContainerLogMaxWorkers == nil {
		c.ContainerLogMaxWorkers = new(int32(1))
	}
	if c.ContainerLogMonitorInterval == nil {
		c.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	if c.RuntimeRequestTimeout.Duration == 0 {
		c.RuntimeRequestTimeout.Duration = 2 * time.Minute
	}
	if c.ImageGCHighThresholdPercent == nil {
		high := int32(85)
		c.ImageGCHighThresholdPercent = &high
	}
	if c.ImageGCLowThresholdPercent == nil {
		low := int32(80)
		c.ImageGCLowThresholdPercent = &low
	}
	if c.EvictionPressureTransitionPeriod.Duration == 0 {
		c.EvictionPressureTransitionPeriod = metav1.Duration{Duration: 5 * time.Minute}
	}
	if c.ImageMinimumGCAge.Duration == 0 {
		c.ImageMinimumGCAge.Duration = 2 * time.Minute
	}
	if c.SerializeImagePulls == nil {
		// As upstream's: parallel pulls when more than one may run.
		c.SerializeImagePulls = new(c.MaxParallelImagePulls == nil || *c.MaxParallelImagePulls < 2)
	}
	// Cluster mode: the kubelet's client rates and reporting periods.
	if c.KubeAPIQPS == nil {
		c.KubeAPIQPS = new(int32(50))
	}
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = 100
	}
	if c.EventRecordQPS == nil {
		c.EventRecordQPS = new(int32(50))
	}
	if c.EventBurst == 0 {
		c.EventBurst = 100
	}
	if c.ContentType == "" {
		c.ContentType = "application/vnd.kubernetes.protobuf"
	}
	if c.NodeStatusUpdateFrequency.Duration == 0 {
		c.NodeStatusUpdateFrequency.Duration = 10 * time.Second
	}
	if c.NodeStatusReportFrequency.Duration == 0 {
		c.NodeStatusReportFrequency.Duration = 5 * time.Minute
	}
	if c.NodeLeaseDurationSeconds == 0 {
		c.NodeLeaseDurationSeconds = 40
	}
	// The kubelet API's security, with the v1beta1 defaults: no
	// anonymous access, tokens and access checked with the API server.
	if c.Authentication.Anonymous.Enabled == nil {
		c.Authentication.Anonymous.Enabled = new(false)
	}
	if c.Authentication.Webhook.Enabled == nil {
		c.Authentication.Webhook.Enabled = new(true)
	}
	if c.Authentication.Webhook.CacheTTL.Duration == 0 {
		c.Authentication.Webhook.CacheTTL.Duration = 2 * time.Minute
	}
	if c.Authorization.Mode == "" {
		c.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
	}
	if c.Authorization.Webhook.CacheAuthorizedTTL.Duration == 0 {
		c.Authorization.Webhook.CacheAuthorizedTTL.Duration = 5 * time.Minute
	}
	if c.Authorization.Webhook.CacheUnauthorizedTTL.Duration == 0 {
		c.Authorization.Webhook.CacheUnauthorizedTTL.Duration = 30 * time.Second
	}
	setResourceManagerDefaults(c)
	setServingDefaults(c)
	setOtherDefaults(c)
	logsapi.SetRecommendedLoggingConfiguration(&c.Logging)
}

// setOtherDefaults fills in the rest of upstream's v1beta1 defaults, so
// that /configz shows every setting as upstream's kubelet does, with its
// effective value: tools and upstream's node e2e suite read the node's
// configuration there, and a field left out reads as false or zero (the
// suite's PodOverhead spec returned early on a missing cgroupsPerQOS).
func setOtherDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	for _, b := range []struct {
		field **bool
		def   bool
	}{
		{&c.CgroupsPerQOS, true}, {&c.EnableControllerAttachDetach, true}, {&c.EnableDebuggingHandlers, true},
		{&c.EnableDebugFlagsHandler, true}, {&c.EnableProfilingHandler, true}, {&c.EnableSystemLogHandler, true},
		{&c.LocalStorageCapacityIsolation, true}, {&c.MakeIPTablesUtilChains, true}, {&c.SeccompDefault, false},
		{&c.MergeDefaultEvictionSettings, false},
	} {
		if *b.field == nil {
			*b.field = new(b.def)
		}
	}
	if c.CPUCFSQuotaPeriod == nil {
		c.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 100 * time.Millisecond}
	}
	if c.ConfigMapAndSecretChangeDetectionStrategy == "" {
		c.ConfigMapAndSecretChangeDetectionStrategy = kubeletv1beta1.WatchChangeDetectionStrategy
	}
	if c.EnforceNodeAllocatable == nil {
		c.EnforceNodeAllocatable = []string{"pods"}
	}
	if c.HairpinMode == "" {
		c.HairpinMode = kubeletv1beta1.PromiscuousBridge
	}
	if c.IPTablesMasqueradeBit == nil {
		c.IPTablesMasqueradeBit = new(int32(14))
	}
	if c.IPTablesDropBit == nil {
		c.IPTablesDropBit = new(int32(15))
	}
	if c.MaxOpenFiles == 0 {
		c.MaxOpenFiles = 1000000
	}
	if c.MemoryReservationPolicy == "" {
		c.MemoryReservationPolicy = kubeletv1beta1.NoneMemoryReservationPolicy
	}
	if c.NodeStatusMaxImages == nil {
		c.NodeStatusMaxImages = new(int32(50))
	}
	if c.OOMScoreAdj == nil {
		c.OOMScoreAdj = new(int32(-999))
	}
	if c.PodPidsLimit == nil || *c.PodPidsLimit < 0 {
		c.PodPidsLimit = new(int64(-1))
	}
	if c.RegistryPullQPS == nil {
		c.RegistryPullQPS = new(int32(5))
	}
	if c.RegistryBurst == 0 {
		c.RegistryBurst = 10
	}
	if c.VolumePluginDir == "" {
		c.VolumePluginDir = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"
	}
	if c.CrashLoopBackOff.MaxContainerRestartPeriod == nil {
		c.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 300 * time.Second}
	}
	if c.ImagePullCredentialsVerificationPolicy == "" {
		c.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.NeverVerifyPreloadedImages
	}
}

// setResourceManagerDefaults fills in the CPU, memory and topology
// managers' defaults, as upstream's.
func setResourceManagerDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	if c.CPUManagerPolicy == "" {
		c.CPUManagerPolicy = "none"
	}
	if c.CPUManagerReconcilePeriod.Duration == 0 {
		c.CPUManagerReconcilePeriod.Duration = 10 * time.Second
	}
	if c.MemoryManagerPolicy == "" {
		c.MemoryManagerPolicy = "None"
	}
	if c.TopologyManagerPolicy == "" {
		c.TopologyManagerPolicy = "none"
	}
	if c.TopologyManagerScope == "" {
		c.TopologyManagerScope = "container"
	}
}

// setServingDefaults fills in upstream's defaults for serving,
// registration and the host: the servers on, the plain /healthz on
// 127.0.0.1:10248, the Node registered, cgroup v1 refused.
func setServingDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	if c.EnableServer == nil {
		c.EnableServer = new(true)
	}
	if c.HealthzPort == nil {
		c.HealthzPort = new(int32(10248))
	}
	if c.HealthzBindAddress == "" {
		c.HealthzBindAddress = "127.0.0.1"
	}
	if c.RegisterNode == nil {
		c.RegisterNode = new(true)
	}
	if c.FailCgroupV1 == nil {
		c.FailCgroupV1 = new(true)
	}
	if c.FailSwapOn == nil {
		c.FailSwapOn = new(true)
	}
	if c.CPUCFSQuota == nil {
		c.CPUCFSQuota = new(true)
	}
}
