package app

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

func h(note string) field           { return field{support: honoured, note: note} }
func ign(def, note string) field    { return field{support: ignored, def: def, note: note} }
func refuse(def, note string) field { return field{support: refused, def: def, note: note} }

// configFields covers every field of KubeletConfiguration v1beta1
// (TestEveryConfigFieldIsClassified keeps it complete); docs/config-fields.md
// is written from it.
var configFields = map[string]field{
	"enableServer":                              h("false serves neither the kubelet API nor the read-only port"),
	"staticPodPath":                             h("static pod directory or file, watched with inotify and re-listed"),
	"podLogsDir":                                h("where container logs go"),
	"syncFrequency":                             h("resync period of running pods"),
	"fileCheckFrequency":                        h("re-list period of staticPodPath"),
	"httpCheckFrequency":                        h("poll period of staticPodURL"),
	"staticPodURL":                              h("URL polled for static pods"),
	"staticPodURLHeader":                        h("headers sent to staticPodURL"),
	"address":                                   h("address of the kubelet API and read-only port"),
	"port":                                      h("kubelet API port"),
	"readOnlyPort":                              h("read-only port (nodelet's default is 10255, upstream's 0)"),
	"tlsCertFile":                               h("serving certificate; a self-signed one otherwise"),
	"tlsPrivateKeyFile":                         h("serving key"),
	"tlsCipherSuites":                           h("cipher suites of the kubelet API (TLS 1.2)"),
	"tlsCurvePreferences":                       refuse("", "nodelet uses Go's default curves"),
	"tlsMinVersion":                             h("minimum TLS version of the kubelet API"),
	"rotateCertificates":                        refuse("", "client certificate rotation is not implemented"),
	"serverTLSBootstrap":                        refuse("", "serving certificates from the CSR API are not implemented"),
	"authentication":                            h("x509 client CA, webhook token review, anonymous"),
	"authorization":                             h("Webhook or AlwaysAllow"),
	"registryPullQPS":                           ign("5", "pulls are not rate limited, only capped by maxParallelImagePulls"),
	"registryBurst":                             ign("10", "pulls are not rate limited, only capped by maxParallelImagePulls"),
	"eventRecordQPS":                            h("rate limit of the event client"),
	"eventBurst":                                h("burst of the event client"),
	"enableDebuggingHandlers":                   refuse("true", "logs, exec, attach and port-forward are always served"),
	"enableContentionProfiling":                 ign("", "no block profiling"),
	"healthzPort":                               h("port of the plain-HTTP /healthz (0 disables it)"),
	"healthzBindAddress":                        h("address of the plain-HTTP /healthz"),
	"oomScoreAdj":                               ign("-999", "nodelet does not change its own OOM score"),
	"clusterDomain":                             h("DNS domain of ClusterFirst pods"),
	"clusterDNS":                                h("DNS servers of ClusterFirst pods"),
	"streamingConnectionIdleTimeout":            ign(`"4h0m0s"`, "streams are the runtime's; its own idle timeout applies"),
	"nodeStatusUpdateFrequency":                 h("how often the node status is checked"),
	"nodeStatusReportFrequency":                 h("how often an unchanged node status is written"),
	"nodeLeaseDurationSeconds":                  h("node lease duration"),
	"imageMinimumGCAge":                         h("an image younger than this is never collected"),
	"imageMaximumGCAge":                         refuse("", "images are collected only for disk usage"),
	"imageGCHighThresholdPercent":               h("image filesystem usage that starts collection"),
	"imageGCLowThresholdPercent":                h("image filesystem usage collection stops at"),
	"volumeStatsAggPeriod":                      ign(`"1m0s"`, "volume usage is measured when asked for"),
	"kubeletCgroups":                            refuse("", "nodelet runs in the cgroup it was started in"),
	"systemCgroups":                             refuse("", "system processes are not moved"),
	"cgroupRoot":                                h("root of the QoS cgroup hierarchy"),
	"cgroupsPerQOS":                             h("QoS and pod cgroups"),
	"cgroupDriver":                              h("cgroupfs; systemd is refused"),
	"cpuManagerPolicy":                          refuse(`"none"`, "CPU pinning is not implemented"),
	"singleProcessOOMKill":                      ign("", "the runtime's default memory.oom.group applies"),
	"cpuManagerPolicyOptions":                   refuse("", "CPU pinning is not implemented"),
	"cpuManagerReconcilePeriod":                 ign(`"10s"`, "no CPU manager"),
	"memoryManagerPolicy":                       refuse(`"None"`, "NUMA memory pinning is not implemented"),
	"topologyManagerPolicy":                     refuse(`"none"`, "topology alignment is not implemented"),
	"topologyManagerScope":                      refuse(`"container"`, "topology alignment is not implemented"),
	"topologyManagerPolicyOptions":              refuse("", "topology alignment is not implemented"),
	"qosReserved":                               refuse("", "memory reservation for QoS classes is not implemented"),
	"runtimeRequestTimeout":                     h("timeout of every unary CRI call"),
	"hairpinMode":                               ign(`"promiscuous-bridge"`, "the CNI configuration decides"),
	"maxPods":                                   h("pod capacity"),
	"podCIDR":                                   ign("", "the CNI configuration assigns pod addresses"),
	"podPidsLimit":                              h("pids.max of each pod cgroup"),
	"resolvConf":                                h("resolver file of dnsPolicy Default pods"),
	"runOnce":                                   refuse("", "run-once mode is not implemented"),
	"cpuCFSQuota":                               h("false leaves CPU limits unenforced (no CFS quota)"),
	"cpuCFSQuotaPeriod":                         refuse(`"100ms"`, "the CFS period is the kernel's 100ms"),
	"nodeStatusMaxImages":                       ign("50", "the node status lists no images"),
	"maxOpenFiles":                              ign("1000000", "nodelet does not raise its own file limit"),
	"contentType":                               h("content type of API requests"),
	"kubeAPIQPS":                                h("rate limit of the API client"),
	"kubeAPIBurst":                              h("burst of the API client"),
	"serializeImagePulls":                       h("one pull at a time"),
	"maxParallelImagePulls":                     h("pulls at once when not serialized"),
	"evictionHard":                              h("hard thresholds: pressure conditions, admission, allocatable and eviction (grace 1 s)"),
	"evictionSoft":                              h("soft thresholds: pressure conditions at once, eviction after their grace period"),
	"evictionSoftGracePeriod":                   h("how long a soft threshold must hold before a pod is evicted"),
	"evictionPressureTransitionPeriod":          h("how long a pressure condition stays after the signal clears"),
	"evictionMaxPodGracePeriod":                 h("caps the grace period of a pod evicted for a soft threshold"),
	"evictionMinimumReclaim":                    h("how far above its threshold a signal must recover"),
	"mergeDefaultEvictionSettings":              refuse("false", "evictionHard replaces the defaults"),
	"podsPerCore":                               h("pod capacity per CPU, capped by maxPods"),
	"enableControllerAttachDetach":              refuse("true", "true marks the Node for the attach/detach controller (annotation volumes.kubernetes.io/controller-managed-attach-detach), which attaches CSI volumes; nodelet never attaches volumes itself"),
	"protectKernelDefaults":                     refuse("", "kernel settings are not checked"),
	"makeIPTablesUtilChains":                    ign("true", "nodelet writes no iptables rules"),
	"iptablesMasqueradeBit":                     ign("14", "nodelet writes no iptables rules"),
	"iptablesDropBit":                           ign("15", "nodelet writes no iptables rules"),
	"featureGates":                              h("each gate at its v1.37 default is accepted; any other value is refused"),
	"failSwapOn":                                ign("true", "swap is not checked"),
	"memorySwap":                                refuse("", "swap for pods is not implemented"),
	"containerLogMaxSize":                       h("log rotation size"),
	"containerLogMaxFiles":                      h("rotated logs kept"),
	"containerLogMaxWorkers":                    h("concurrent log rotations"),
	"containerLogMonitorInterval":               h("log rotation check period"),
	"configMapAndSecretChangeDetectionStrategy": refuse(`"Watch"`, "objects are always watched"),
	"systemReserved":                            h("reserved from allocatable and the QoS cgroups"),
	"kubeReserved":                              h("reserved from allocatable and the QoS cgroups"),
	"reservedSystemCPUs":                        refuse("", "CPU pinning is not implemented"),
	"showHiddenMetricsForVersion":               ign("", "no hidden metrics"),
	"systemReservedCgroup":                      refuse("", "only pods' allocatable is enforced"),
	"kubeReservedCgroup":                        refuse("", "only pods' allocatable is enforced"),
	"enforceNodeAllocatable":                    refuse(`["pods"]`, "only pods' allocatable is enforced"),
	"allowedUnsafeSysctls":                      h("unsafe sysctls pods may set"),
	"defaultPodSysctls":                         refuse("", "no default pod sysctls"),
	"volumePluginDir":                           ign(`"/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"`, "no FlexVolume plugins"),
	"providerID":                                h("spec.providerID of the registered Node"),
	"kernelMemcgNotification":                   ign("", "memory is measured every 10s"),
	"logging":                                   refuse("", "logs are klog text; -v sets the verbosity"),
	"enableSystemLogHandler":                    ign("true", "/logs/ is not served"),
	"enableSystemLogQuery":                      ign("", "/logs/ is not served"),
	"shutdownGracePeriod":                       h("graceful node shutdown on SIGTERM (no logind here): NotReady, new pods refused, pods stopped by priority, nodelet exits"),
	"shutdownGracePeriodCriticalPods":           h("the part of shutdownGracePeriod for critical pods, stopped after the others"),
	"shutdownGracePeriodByPodPriority":          h("shutdown groups by pod priority, lowest stopped first, each within its period"),
	"crashLoopBackOff":                          refuse("", "the crash-loop back-off is upstream's default, 10s to 5m"),
	"reservedMemory":                            refuse("", "NUMA memory reservation is not implemented"),
	"enableProfilingHandler":                    h("/debug/pprof on the kubelet API"),
	"enableDebugFlagsHandler":                   ign("true", "/debug/flags/v is not served"),
	"seccompDefault":                            refuse("", "containers without a profile run unconfined"),
	"memoryThrottlingFactor":                    ign("", "cgroup v2 memory.high is not set"),
	"memoryReservationPolicy":                   refuse(`"None"`, "memory.min is not set"),
	"registerWithTaints":                        h("taints of the registered Node"),
	"registerNode":                              h("false never creates the Node; an existing one is updated"),
	"tracing":                                   refuse("", "no OpenTelemetry tracing"),
	"localStorageCapacityIsolation":             refuse("true", "ephemeral-storage is always reported"),
	"containerRuntimeEndpoint":                  h("CRI endpoint"),
	"imageServiceEndpoint":                      refuse("", "images go through the runtime endpoint"),
	"failCgroupV1":                              h("true (the default) refuses a cgroup v1 host"),
	"userNamespaces":                            refuse("", "user namespaces are not implemented"),
	"imagePullCredentialsVerificationPolicy":    refuse(`"NeverVerifyPreloadedImages"`, "pulled images are not re-verified"),
	"preloadedImagesVerificationAllowlist":      refuse("", "pulled images are not re-verified"),
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

// sameValue reports whether value and def decode to the same field value.
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
