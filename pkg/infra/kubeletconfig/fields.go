package kubeletconfig

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// support is what nodelet does with a KubeletConfiguration field.
type support int

const (
	// honoured: nodelet does what the field says.
	honoured support = iota
	// ignored: nodelet does not act on it, and nothing an operator relies
	// on depends on that; a non-default value is logged as a warning.
	ignored
	// refused: nodelet cannot do what a non-default value asks, and
	// running as if it had would mislead; start-up fails naming the field.
	refused
)

func (s support) String() string { return [...]string{"honoured", "ignored (warning)", "refused"}[s] }

// field says how nodelet treats one KubeletConfiguration field.
type field struct {
	support support
	// def is upstream's default as JSON (empty: the zero value). An
	// ignored or refused field set to it is accepted silently.
	def string
	// note says what nodelet does, for the docs table and the messages.
	note string
}

func honour(note string) field      { return field{support: honoured, note: note} }
func ign(def, note string) field    { return field{support: ignored, def: def, note: note} }
func refuse(def, note string) field { return field{support: refused, def: def, note: note} }

// configFields covers every field of KubeletConfiguration v1beta1
// (TestEveryConfigFieldIsClassified keeps it complete); docs/config-fields.md
// is written from it.
var configFields = map[string]field{
	"enableServer":                              honour("false serves neither the kubelet API nor the read-only port"),
	"staticPodPath":                             honour("static pod directory or file, watched with inotify and re-listed"),
	"podLogsDir":                                honour("where container logs go"),
	"syncFrequency":                             honour("resync period of running pods"),
	"fileCheckFrequency":                        honour("re-list period of staticPodPath"),
	"httpCheckFrequency":                        honour("poll period of staticPodURL"),
	"staticPodURL":                              honour("URL polled for static pods"),
	"staticPodURLHeader":                        honour("headers sent to staticPodURL"),
	"address":                                   honour("address of the kubelet API and read-only port"),
	"port":                                      honour("kubelet API port"),
	"readOnlyPort":                              honour("unauthenticated read-only port serving /pods, /healthz, /stats/summary and the metrics, as upstream's (0, the default, turns it off)"),
	"tlsCertFile":                               honour("serving certificate, reloaded when it changes on disk; a self-signed one (<cert-dir>/kubelet.crt) otherwise"),
	"tlsPrivateKeyFile":                         honour("serving key"),
	"tlsCipherSuites":                           honour("cipher suites of the kubelet API (TLS 1.2)"),
	"tlsCurvePreferences":                       refuse("", "nodelet uses Go's default curves"),
	"tlsMinVersion":                             honour("minimum TLS version of the kubelet API"),
	"rotateCertificates":                        honour("the client certificate is renewed through the CSR API at 70–90% of its lifetime and every API connection moves to it"),
	"serverTLSBootstrap":                        honour("the kubelet API's certificate comes from a kubernetes.io/kubelet-serving CSR for the node's names and addresses, and is rotated"),
	"authentication":                            honour("x509 client CA, webhook token review, anonymous"),
	"authorization":                             honour("Webhook or AlwaysAllow"),
	"registryPullQPS":                           ign("5", "pulls are not rate limited, only capped by maxParallelImagePulls"),
	"registryBurst":                             ign("10", "pulls are not rate limited, only capped by maxParallelImagePulls"),
	"eventRecordQPS":                            honour("rate limit of the event client"),
	"eventBurst":                                honour("burst of the event client"),
	"enableDebuggingHandlers":                   refuse("true", "logs, exec, attach and port-forward are always served"),
	"enableContentionProfiling":                 ign("", "no block profiling"),
	"healthzPort":                               honour("port of the plain-HTTP /healthz (0 disables it)"),
	"healthzBindAddress":                        honour("address of the plain-HTTP /healthz"),
	"oomScoreAdj":                               ign("-999", "nodelet does not change its own OOM score"),
	"clusterDomain":                             honour("DNS domain of ClusterFirst pods"),
	"clusterDNS":                                honour("DNS servers of ClusterFirst pods"),
	"streamingConnectionIdleTimeout":            ign(`"4h0m0s"`, "streams are the runtime's; its own idle timeout applies"),
	"nodeStatusUpdateFrequency":                 honour("how often the node status is checked"),
	"nodeStatusReportFrequency":                 honour("how often an unchanged node status is written"),
	"nodeLeaseDurationSeconds":                  honour("node lease duration"),
	"imageMinimumGCAge":                         honour("an image younger than this is never collected"),
	"imageMaximumGCAge":                         refuse("", "images are collected only for disk usage"),
	"imageGCHighThresholdPercent":               honour("image filesystem usage that starts collection"),
	"imageGCLowThresholdPercent":                honour("image filesystem usage collection stops at"),
	"volumeStatsAggPeriod":                      ign(`"1m0s"`, "volume usage is measured when asked for"),
	"kubeletCgroups":                            honour("the cgroup nodelet moves itself into, at start and every minute (cgroupfs path, whatever the driver, as upstream); reported by the summary API as \"kubelet\""),
	"systemCgroups":                             honour("the cgroup nodelet moves the root cgroup's other processes into (not init or kernel threads), at start and every minute; reported as \"misc\"; \"/\" is refused"),
	"cgroupRoot":                                honour("root of the QoS cgroup hierarchy"),
	"cgroupsPerQOS":                             honour("QoS and pod cgroups"),
	"cgroupDriver":                              honour("cgroupfs, or systemd (slices created through systemd's D-Bus API); the runtime's reported driver wins"),
	"cpuManagerPolicy":                          honour("none, or static: a Guaranteed pod's containers asking whole CPUs get CPUs of their own (cpuset, kept in <root-dir>/cpu_manager_state in upstream's format), the others share the rest"),
	"singleProcessOOMKill":                      honour("on cgroup v2, false (the default) sets memory.oom.group=1 on every container, so the OOM killer kills a container whole; true leaves it unset; on cgroup v1 false is refused at start, as upstream"),
	"cpuManagerPolicyOptions":                   honour("full-pcpus-only (whole cores only, or SMTAlignmentError) and strict-cpu-reservation; other options are refused at start"),
	"cpuManagerReconcilePeriod":                 honour("how often running containers' cpusets are brought up to date (at once when the shared pool changes)"),
	"memoryManagerPolicy":                       honour("None, or Static: a Guaranteed pod's memory and huge pages on the fewest NUMA nodes (cpuset.mems), kept in <root-dir>/memory_manager_state in upstream's format"),
	"topologyManagerPolicy":                     honour("none, best-effort, restricted or single-numa-node: the device, CPU and memory managers' NUMA hints merged; a pod that cannot be placed is refused (TopologyAffinityError)"),
	"topologyManagerScope":                      honour("container or pod"),
	"topologyManagerPolicyOptions":              honour("prefer-closest-numa-nodes and max-allowable-numa-nodes"),
	"qosReserved":                               refuse("", "memory reservation for QoS classes is not implemented"),
	"runtimeRequestTimeout":                     honour("timeout of every unary CRI call"),
	"hairpinMode":                               ign(`"promiscuous-bridge"`, "the CNI configuration decides"),
	"maxPods":                                   honour("pod capacity"),
	"podCIDR":                                   ign("", "the CNI configuration assigns pod addresses"),
	"podPidsLimit":                              honour("pids.max of each pod cgroup"),
	"resolvConf":                                honour("resolver file of dnsPolicy Default pods"),
	"runOnce":                                   refuse("", "run-once mode is not implemented"),
	"cpuCFSQuota":                               honour("false leaves CPU limits unenforced (no CFS quota)"),
	"cpuCFSQuotaPeriod":                         refuse(`"100ms"`, "the CFS period is the kernel's 100ms"),
	"nodeStatusMaxImages":                       ign("50", "the node status lists no images"),
	"maxOpenFiles":                              ign("1000000", "nodelet does not raise its own file limit"),
	"contentType":                               honour("content type of API requests"),
	"kubeAPIQPS":                                honour("rate limit of the API client"),
	"kubeAPIBurst":                              honour("burst of the API client"),
	"serializeImagePulls":                       honour("one pull at a time"),
	"maxParallelImagePulls":                     honour("pulls at once when not serialized"),
	"evictionHard":                              honour("hard thresholds: pressure conditions, admission, allocatable and eviction (grace 1 s)"),
	"evictionSoft":                              honour("soft thresholds: pressure conditions at once, eviction after their grace period"),
	"evictionSoftGracePeriod":                   honour("how long a soft threshold must hold before a pod is evicted"),
	"evictionPressureTransitionPeriod":          honour("how long a pressure condition stays after the signal clears"),
	"evictionMaxPodGracePeriod":                 honour("caps the grace period of a pod evicted for a soft threshold"),
	"evictionMinimumReclaim":                    honour("how far above its threshold a signal must recover"),
	"mergeDefaultEvictionSettings":              refuse("false", "evictionHard replaces the defaults"),
	"podsPerCore":                               honour("pod capacity per CPU, capped by maxPods"),
	"enableControllerAttachDetach":              refuse("true", "true marks the Node for the attach/detach controller (annotation volumes.kubernetes.io/controller-managed-attach-detach), which attaches CSI volumes; nodelet never attaches volumes itself"),
	"protectKernelDefaults":                     honour("true refuses to start unless vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10, kernel.panic_on_oops=1, kernel.keys.root_maxkeys=1000000 and kernel.keys.root_maxbytes=25000000, naming the first that differs; false sets those that differ, as upstream"),
	"makeIPTablesUtilChains":                    ign("true", "nodelet writes no iptables rules"),
	"iptablesMasqueradeBit":                     ign("14", "nodelet writes no iptables rules"),
	"iptablesDropBit":                           ign("15", "nodelet writes no iptables rules"),
	"featureGates":                              honour("each gate at its v1.37 default is accepted; any other value is refused"),
	"failSwapOn":                                honour("true (the default) refuses to start on a node with swap on (/proc/swaps); false starts, and containers get swap only as memorySwap allows"),
	"memorySwap":                                honour("swapBehavior NoSwap (the default: no swap for containers, memory.swap.max 0 on cgroup v2, memsw equal to the memory limit on v1) or LimitedSwap (on cgroup v2, Burstable containers get their memory request's share of the node's swap)"),
	"containerLogMaxSize":                       honour("log rotation size"),
	"containerLogMaxFiles":                      honour("rotated logs kept"),
	"containerLogMaxWorkers":                    honour("concurrent log rotations"),
	"containerLogMonitorInterval":               honour("log rotation check period"),
	"configMapAndSecretChangeDetectionStrategy": refuse(`"Watch"`, "objects are always watched"),
	"systemReserved":                            honour("reserved from allocatable and the QoS cgroups"),
	"kubeReserved":                              honour("reserved from allocatable and the QoS cgroups"),
	"reservedSystemCPUs":                        honour("CPUs kept for the system: the static CPU manager never hands them out, and they replace the cpu of systemReserved and kubeReserved"),
	"showHiddenMetricsForVersion":               ign("", "no hidden metrics"),
	"systemReservedCgroup":                      refuse("", "only pods' allocatable is enforced"),
	"kubeReservedCgroup":                        refuse("", "only pods' allocatable is enforced"),
	"enforceNodeAllocatable":                    refuse(`["pods"]`, "only pods' allocatable is enforced"),
	"allowedUnsafeSysctls":                      honour("unsafe sysctls pods may set"),
	"defaultPodSysctls":                         refuse("", "no default pod sysctls"),
	"volumePluginDir":                           ign(`"/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"`, "no FlexVolume plugins"),
	"providerID":                                honour("spec.providerID of the registered Node"),
	"kernelMemcgNotification":                   ign("", "memory is measured every 10s"),
	"logging":                                   honour("format (text or json), verbosity, vmodule and flush frequency, through component-base's logging"),
	"enableSystemLogHandler":                    ign("true", "/logs/ is not served"),
	"enableSystemLogQuery":                      ign("", "/logs/ is not served"),
	"shutdownGracePeriod":                       honour("graceful node shutdown announced by systemd-logind (a delay inhibitor lock; InhibitDelayMaxSec raised to it): NotReady, new pods refused, pods stopped by priority; SIGTERM only stops nodelet"),
	"shutdownGracePeriodCriticalPods":           honour("the part of shutdownGracePeriod for critical pods, stopped after the others"),
	"shutdownGracePeriodByPodPriority":          honour("shutdown groups by pod priority, lowest stopped first, each within its period"),
	"crashLoopBackOff":                          honour("maxContainerRestartPeriod caps the crash-loop back-off (1s to 300s; the first delay is 10s or the cap if lower)"),
	"reservedMemory":                            honour("memory and huge pages per NUMA node kept for the system by the Static memory manager; must add up to what node allocatable keeps back"),
	"enableProfilingHandler":                    honour("/debug/pprof on the kubelet API"),
	"enableDebugFlagsHandler":                   ign("true", "/debug/flags/v is not served"),
	"seccompDefault":                            honour("containers and sandboxes without a seccomp profile get the runtime's default profile (RuntimeDefault); Localhost profiles are read from <root-dir>/seccomp"),
	"memoryThrottlingFactor":                    ign("", "cgroup v2 memory.high is not set"),
	"memoryReservationPolicy":                   refuse(`"None"`, "memory.min is not set"),
	"registerWithTaints":                        honour("taints of the registered Node"),
	"registerNode":                              honour("false never creates the Node; an existing one is updated"),
	"tracing":                                   honour("each pod's start (until Ready) and its termination as one trace each, over OTLP/gRPC to endpoint (default localhost:4317), sampled at samplingRatePerMillion (default 0: none); a span per timeline step, CRI calls under their sync"),
	"localStorageCapacityIsolation":             refuse("true", "ephemeral-storage is always reported"),
	"containerRuntimeEndpoint":                  honour("CRI endpoint"),
	"imageServiceEndpoint":                      honour("the CRI image service's endpoint when not the runtime's (a unix socket; an image service must answer there at start)"),
	"failCgroupV1":                              honour("true (the default) refuses a cgroup v1 host"),
	"userNamespaces":                            honour("idsPerPod: the length of each hostUsers: false pod's range of host IDs, taken from the kubelet entry of /etc/subuid and /etc/subgid or from idsPerPod up, and kept in <root-dir>/pods/<uid>/userns"),
	"imagePullCredentialsVerificationPolicy":    honour("which present images a pod must prove it may pull (NeverVerify, NeverVerifyPreloadedImages, the default, NeverVerifyAllowlistedImages, AlwaysVerify): the credentials that pulled each image are kept in <root-dir>/image_manager in upstream's format, and a pod with none of them pulls the image again with its own (or fails: ErrImagePull, ErrImageNeverPull)"),
	"preloadedImagesVerificationAllowlist":      honour("images (names without tag, or prefixes ending in /*) NeverVerifyAllowlistedImages never verifies"),
}

// checkFields applies the table to the fields a config file sets (raw,
// its top-level JSON): a refused field set to anything but its default is
// an error naming it; an ignored one a warning.
func checkFields(raw map[string]json.RawMessage) (warnings []string, err error) {
	var refusals []string
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		f, ok := configFields[name]
		if !ok || f.support == honoured {
			continue
		}
		same, err := sameValue(name, raw[name], f.def)
		if err != nil || same {
			continue // a decoding error is reported by the full decode
		}
		msg := fmt.Sprintf("%s: %s", name, f.note)
		if f.support == refused {
			refusals = append(refusals, msg+" (remove it"+defaultHint(f.def)+")")
		} else {
			warnings = append(warnings, msg+"; the setting is ignored")
		}
	}
	if len(refusals) > 0 {
		return warnings, fmt.Errorf("unsupported settings: %s", strings.Join(refusals, "; "))
	}
	return warnings, nil
}

func defaultHint(def string) string {
	if def == "" {
		return ""
	}
	return " or set it to " + def
}

// sameValue reports whether value means the default def: it decodes to
// the same field value, or to the zero value of a field that is not a
// pointer.
func sameValue(name string, value json.RawMessage, def string) (bool, error) {
	decode := func(v string) (reflect.Value, error) {
		var c kubeletv1beta1.KubeletConfiguration
		if v != "" {
			if err := json.Unmarshal([]byte(`{"`+name+`":`+v+`}`), &c); err != nil {
				return reflect.Value{}, err
			}
		}
		return fieldByJSONName(reflect.ValueOf(c), name), nil
	}
	got, err := decode(string(value))
	if err != nil {
		return false, err
	}
	if got.Kind() != reflect.Pointer && got.IsZero() {
		// Upstream's defaulting replaces a zero value ("0s", {}, "") with
		// the default: kubeadm writes such values for every duration.
		return true, nil
	}
	want, err := decode(def)
	if err != nil {
		return false, err
	}
	if got.Kind() == reflect.Pointer && !got.IsNil() && want.Kind() == reflect.Pointer && want.IsNil() {
		// A pointer set to its type's zero value is the default nil.
		return got.Elem().IsZero(), nil
	}
	return reflect.DeepEqual(got.Interface(), want.Interface()), nil
}

func fieldByJSONName(v reflect.Value, name string) reflect.Value {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if strings.Split(t.Field(i).Tag.Get("json"), ",")[0] == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}
