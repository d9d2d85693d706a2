package validationdiff

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
)

// The fuzzer mutates a corpus pod as a JSON tree, not as bytes: random
// bytes almost never decode into a Pod, so a byte-level fuzzer would test
// the decoder. Each mutation is three bytes (where, what, which value):
// replace a leaf by an interesting value of its type, delete a field or
// an item, duplicate an item, rename a map's key (a resource name, a
// label or annotation key), or graft a field from the catalog (fields
// the corpus pods do not carry, after upstream's validation test tables).

// strs are the strings upstream's checks turn on: names, paths, enums,
// quantities, sysctls, label keys.
var strs = []string{
	"", "a", "A", "a-b", "-a", "a-", "a.b", "a_b", "a/b", "/a", "/a/b", "..", "../a", "a/../b", "..a", "a..", ".",
	"1", "0", "-1", "a b", "a=b", "$(A)", "*", "TCP", "tcp", "UDP", "SCTP", "Always", "Never", "OnFailure",
	"IfNotPresent", "Unmasked", "Default", "ClusterFirst", "ClusterFirstWithHostNet", "None", "Exists", "Equal",
	"NoExecute", "NoSchedule", "In", "NotIn", "DoesNotExist", "Gt", "File", "FallbackToLogsOnError",
	"RuntimeDefault", "Localhost", "Unconfined", "Bidirectional", "HostToContainer", "Enabled", "IfPossible",
	"Disabled", "NotRequired", "RestartContainer", "ALL", "CAP_SYS_ADMIN", "NET_ADMIN", "100m", "1Gi", "-1",
	"0.5", "1e3", "1.5Gi", "kernel.shm_rmid_forced", "net.ipv4.ip_forward", "kernel.msgmax", "kernel/shm_rmid_forced",
	"net.core.somaxconn", "metadata.name", "metadata.labels", "metadata.labels['a']", "spec.nodeName",
	"status.podIP", "limits.cpu", "requests.memory", "example.com/a", "example.com/", "kubernetes.io/a",
	"hugepages-2Mi", "cpu", "memory", "ephemeral-storage", "a.b.c/d", "1.2.3.4", "::1", "256.1.1.1", "8.8.8.8",
	"localhost", "Linux", "windows", "DirectoryOrCreate", "Directory", "Socket", "Block", "x",
	strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 253), strings.Repeat("a", 254),
	strings.Repeat("a.", 127), "a\x00b", "é", "0777", "https://a", "a:b",
}

// nums are the numbers at the edges of upstream's ranges.
var nums = []float64{0, -1, 1, 2, 10, 59, 60, 511, 512, 599, 600, 0o777, 0o1000, 1023, 65535, 65536,
	2147483647, 2147483648, -2147483648, 4294967296, 4294967297, 1e12}

// catalog grafts: a path (dots; a number is an index) and the JSON set there.
var catalog = []struct{ path, value string }{
	{"spec.containers.0.livenessProbe", `{"exec":{"command":["true"]},"periodSeconds":1}`},
	{"spec.containers.0.livenessProbe", `{"httpGet":{"port":80,"path":"/"},"successThreshold":2}`},
	{"spec.containers.0.readinessProbe", `{"tcpSocket":{"port":"http"},"terminationGracePeriodSeconds":5}`},
	{"spec.containers.0.startupProbe", `{"grpc":{"port":9000},"failureThreshold":0}`},
	{"spec.containers.0.livenessProbe", `{"exec":{"command":["true"]},"httpGet":{"port":80}}`},
	{"spec.containers.0.livenessProbe", `{}`},
	{"spec.containers.0.lifecycle", `{"preStop":{"exec":{"command":["true"]}},"postStart":{"httpGet":{"port":8080}}}`},
	{"spec.containers.0.lifecycle", `{"preStop":{"sleep":{"seconds":5}},"stopSignal":"SIGTERM"}`},
	{"spec.containers.0.lifecycle", `{"preStop":{}}`},
	{"spec.containers.0.ports", `[{"containerPort":80,"name":"http","hostPort":8080,"hostIP":"127.0.0.1"}]`},
	{"spec.containers.0.ports", `[{"containerPort":80},{"containerPort":80}]`},
	{"spec.containers.0.ports", `[{"containerPort":80,"hostPort":80},{"containerPort":81,"hostPort":80}]`},
	{"spec.containers.0.env", `[{"name":"A","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}]`},
	{"spec.containers.0.env", `[{"name":"A","value":"x","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]`},
	{"spec.containers.0.env", `[{"name":"A","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"1m"}}}]`},
	{"spec.containers.0.env", `[{"name":"A","valueFrom":{"configMapKeyRef":{"name":"c","key":"k"}}}]`},
	{"spec.containers.0.envFrom", `[{"configMapRef":{"name":"c"},"prefix":"P_"}]`},
	{"spec.containers.0.envFrom", `[{"secretRef":{"name":"s"},"configMapRef":{"name":"c"}}]`},
	{"spec.containers.0.volumeMounts", `[{"name":"v","mountPath":"/v","subPath":"a/b"}]`},
	{"spec.containers.0.volumeMounts", `[{"name":"v","mountPath":"/v","subPath":"a","subPathExpr":"$(A)"}]`},
	{"spec.containers.0.volumeMounts", `[{"name":"v","mountPath":"/v","mountPropagation":"Bidirectional"}]`},
	{"spec.containers.0.volumeMounts", `[{"name":"v","mountPath":"/v","recursiveReadOnly":"Enabled","readOnly":true}]`},
	{"spec.containers.0.volumeMounts", `[{"name":"v","mountPath":"/v"},{"name":"v","mountPath":"/v"}]`},
	{"spec.containers.0.volumeDevices", `[{"name":"v","devicePath":"/dev/x"}]`},
	{"spec.volumes", `[{"name":"v","emptyDir":{"sizeLimit":"1Gi","medium":"Memory"}}]`},
	{"spec.volumes", `[{"name":"v","hostPath":{"path":"/tmp","type":"DirectoryOrCreate"}}]`},
	{"spec.volumes", `[{"name":"v","persistentVolumeClaim":{"claimName":"c"}}]`},
	{"spec.volumes", `[{"name":"v","nfs":{"server":"s","path":"/x"}}]`},
	{"spec.volumes", `[{"name":"v","gcePersistentDisk":{"pdName":"d","partition":1}}]`},
	{"spec.volumes", `[{"name":"v","awsElasticBlockStore":{"volumeID":"v","partition":256}}]`},
	{"spec.volumes", `[{"name":"v","iscsi":{"targetPortal":"1.2.3.4:3260","iqn":"iqn.2001-04.com.example:storage","lun":0,"initiatorName":"iqn.2001-04.com.example:node"}}]`},
	{"spec.volumes", `[{"name":"v","iscsi":{"targetPortal":"t","iqn":"eui.0123456789ABCDEF","lun":1,"chapAuthSession":true}}]`},
	{"spec.volumes", `[{"name":"v","glusterfs":{"endpoints":"e","path":"p"}}]`},
	{"spec.volumes", `[{"name":"v","rbd":{"monitors":["m"],"image":"i"}}]`},
	{"spec.volumes", `[{"name":"v","cinder":{"volumeID":"v","secretRef":{}}}]`},
	{"spec.volumes", `[{"name":"v","cephfs":{"monitors":["m"]}}]`},
	{"spec.volumes", `[{"name":"v","flocker":{"datasetName":"a/b"}}]`},
	{"spec.volumes", `[{"name":"v","quobyte":{"registry":"r:7861","volume":"v"}}]`},
	{"spec.volumes", `[{"name":"v","fc":{"targetWWNs":["w"],"lun":1}}]`},
	{"spec.volumes", `[{"name":"v","flexVolume":{"driver":"d","options":{"example.kubernetes.io/x":"y"}}}]`},
	{"spec.volumes", `[{"name":"v","azureFile":{"secretName":"s","shareName":"x"}}]`},
	{"spec.volumes", `[{"name":"v","azureDisk":{"diskName":"d","diskURI":"https://a/b.vhd","kind":"Managed","cachingMode":"None"}}]`},
	{"spec.volumes", `[{"name":"v","vsphereVolume":{"volumePath":"p"}}]`},
	{"spec.volumes", `[{"name":"v","photonPersistentDisk":{"pdID":"p"}}]`},
	{"spec.volumes", `[{"name":"v","portworxVolume":{"volumeID":"p"}}]`},
	{"spec.volumes", `[{"name":"v","scaleIO":{"gateway":"g","system":"s","volumeName":"v","secretRef":{"name":"s"}}}]`},
	{"spec.volumes", `[{"name":"v","storageos":{"volumeName":"V","volumeNamespace":"n"}}]`},
	{"spec.volumes", `[{"name":"v","csi":{"driver":"d.example.com"}}]`},
	{"spec.volumes", `[{"name":"v","image":{"reference":"img","pullPolicy":"IfNotPresent"}}]`},
	{"spec.volumes", `[{"name":"v","emptyDir":{},"hostPath":{"path":"/tmp"}}]`},
	{"spec.volumes", `[{"name":"v"}]`},
	{"spec.volumes", `[{"name":"v","ephemeral":{"volumeClaimTemplate":{"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}}}]`},
	{"spec.volumes", `[{"name":"v","projected":{"sources":[{"serviceAccountToken":{"path":"t","expirationSeconds":3600}}]}}]`},
	{"spec.volumes", `[{"name":"v","projected":{"sources":[{"clusterTrustBundle":{"signerName":"example.com/s","path":"b.pem","labelSelector":{}}}]}}]`},
	{"spec.volumes", `[{"name":"v","projected":{"sources":[{"clusterTrustBundle":{"name":"example.com:s:bundle","path":"b.pem"}}]}}]`},
	{"spec.volumes", `[{"name":"v","projected":{"sources":[{"podCertificate":{"signerName":"example.com/s","keyType":"ED25519","credentialBundlePath":"c.pem","maxExpirationSeconds":86400}}]}}]`},
	{"spec.volumes", `[{"name":"v","ephemeral":{"volumeClaimTemplate":{"metadata":{"labels":{"a":"b"}},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"dataSource":{"kind":"VolumeSnapshot","apiGroup":"snapshot.storage.k8s.io","name":"s"}}}}}]`},
	{"spec.volumes", `[{"name":"v","ephemeral":{"volumeClaimTemplate":{"metadata":{"name":"x"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"dataSourceRef":{"kind":"PersistentVolumeClaim","name":"p"},"volumeMode":"Block"}}}}]`},
	{"spec.containers.0.resources", `{"limits":{"cpu":"1","memory":"1Gi"},"requests":{"cpu":"2"}}`},
	{"spec.containers.0.resources", `{"limits":{"hugepages-2Mi":"2Mi","memory":"1Gi"}}`},
	{"spec.containers.0.resources", `{"limits":{"example.com/dev":"1"},"requests":{"example.com/dev":"2"}}`},
	{"spec.containers.0.resources", `{"requests":{"example.com/dev":"1"}}`},
	{"spec.containers.0.resources", `{"limits":{"cpu":"-1"}}`},
	{"spec.containers.0.resources", `{"claims":[{"name":"c"}]}`},
	{"spec.containers.0.resizePolicy", `[{"resourceName":"cpu","restartPolicy":"NotRequired"}]`},
	{"spec.containers.0.resizePolicy", `[{"resourceName":"memory","restartPolicy":"RestartContainer"},{"resourceName":"memory","restartPolicy":"NotRequired"}]`},
	{"spec.containers.0.restartPolicy", `"Always"`},
	{"spec.containers.0.terminationMessagePolicy", `"FallbackToLogsOnError"`},
	{"spec.containers.0.terminationMessagePath", `"/dev/termination-log"`},
	{"spec.containers.0.workingDir", `"/w"`},
	{"spec.containers.0.securityContext", `{"capabilities":{"add":["NET_ADMIN"],"drop":["ALL"]},"readOnlyRootFilesystem":true}`},
	{"spec.containers.0.securityContext", `{"seccompProfile":{"type":"Localhost","localhostProfile":"p.json"}}`},
	{"spec.containers.0.securityContext", `{"seccompProfile":{"type":"Localhost"}}`},
	{"spec.containers.0.securityContext", `{"appArmorProfile":{"type":"Localhost","localhostProfile":"p"}}`},
	{"spec.containers.0.securityContext", `{"seLinuxOptions":{"level":"s0:c1,c2","type":"t"}}`},
	{"spec.containers.0.securityContext", `{"windowsOptions":{"hostProcess":true}}`},
	{"spec.containers.0.securityContext", `{"privileged":true,"procMount":"Unmasked"}`},
	{"spec.containers.0.securityContext", `{"runAsNonRoot":true,"runAsUser":0}`},
	{"spec.initContainers", `[{"name":"i","image":"img","restartPolicy":"Always","startupProbe":{"exec":{"command":["true"]}}}]`},
	{"spec.initContainers", `[{"name":"i","image":"img","readinessProbe":{"exec":{"command":["true"]}}}]`},
	{"spec.initContainers", `[{"name":"i","image":"img","lifecycle":{"postStart":{"exec":{"command":["true"]}}}}]`},
	{"spec.initContainers", `[{"name":"c","image":"img"}]`},
	{"spec.ephemeralContainers", `[{"name":"e","image":"img"}]`},
	{"spec.dnsPolicy", `"None"`},
	{"spec.dnsConfig", `{"nameservers":["8.8.8.8"],"searches":["a.b"],"options":[{"name":"ndots","value":"2"}]}`},
	{"spec.dnsConfig", `{"nameservers":["1.1.1.1","1.0.0.1","8.8.8.8","8.8.4.4"]}`},
	{"spec.hostAliases", `[{"ip":"1.2.3.4","hostnames":["a.b"]}]`},
	{"spec.hostname", `"h"`},
	{"spec.subdomain", `"s"`},
	{"spec.setHostnameAsFQDN", `true`},
	{"spec.hostnameOverride", `"h.example"`},
	{"spec.activeDeadlineSeconds", `60`},
	{"spec.priorityClassName", `"system-node-critical"`},
	{"spec.priority", `2000001000`},
	{"spec.preemptionPolicy", `"Never"`},
	{"spec.runtimeClassName", `"runc"`},
	{"spec.serviceAccountName", `"sa"`},
	{"spec.automountServiceAccountToken", `false`},
	{"spec.nodeSelector", `{"kubernetes.io/os":"linux"}`},
	{"spec.tolerations", `[{"key":"k","operator":"Equal","value":"v","effect":"NoSchedule"}]`},
	{"spec.tolerations", `[{"key":"k","operator":"Exists","value":"v"}]`},
	{"spec.tolerations", `[{"operator":"Exists","effect":"NoExecute","tolerationSeconds":10}]`},
	{"spec.affinity", `{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"k","operator":"In","values":["v"]}]}]}}}`},
	{"spec.affinity", `{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"kubernetes.io/hostname","labelSelector":{"matchLabels":{"a":"b"}}}]}}`},
	{"spec.topologySpreadConstraints", `[{"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule"}]`},
	{"spec.readinessGates", `[{"conditionType":"example.com/ready"}]`},
	{"spec.schedulingGates", `[{"name":"example.com/gate"}]`},
	{"spec.os", `{"name":"linux"}`},
	{"spec.os", `{"name":"windows"}`},
	{"spec.hostNetwork", `true`},
	{"spec.hostPID", `true`},
	{"spec.hostIPC", `true`},
	{"spec.hostUsers", `false`},
	{"spec.shareProcessNamespace", `true`},
	{"spec.imagePullSecrets", `[{"name":"s"}]`},
	{"spec.imagePullSecrets", `[{}]`},
	{"spec.overhead", `{"cpu":"100m"}`},
	{"spec.resources", `{"limits":{"cpu":"1","memory":"1Gi"}}`},
	{"spec.resourceClaims", `[{"name":"c","resourceClaimName":"rc"}]`},
	{"spec.securityContext", `{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"},"fsGroupChangePolicy":"OnRootMismatch"}`},
	{"spec.securityContext", `{"supplementalGroupsPolicy":"Strict","seLinuxChangePolicy":"Recursive"}`},
	{"spec.securityContext", `{"sysctls":[{"name":"net.ipv4.ip_forward","value":"1"}]}`},
	{"spec.securityContext", `{"appArmorProfile":{"type":"RuntimeDefault"}}`},
	{"spec.restartPolicy", `"Never"`},
	{"spec.nodeName", `"other"`},
	{"metadata.labels", `{"app":"a","example.com/x":"y"}`},
	{"metadata.annotations", `{"seccomp.security.alpha.kubernetes.io/pod":"runtime/default"}`},
	{"metadata.annotations", `{"container.apparmor.security.beta.kubernetes.io/c":"runtime/default"}`},
	{"metadata.annotations", `{"a":"b"}`},
	{"metadata.generateName", `"g-"`},
	{"metadata.namespace", `"kube-system"`},
}

// mutate applies the mutations ops names to a copy of the pod as JSON.
func mutate(pod []byte, ops []byte) ([]byte, bool) {
	var root any
	if err := json.Unmarshal(pod, &root); err != nil {
		return nil, false
	}
	for i := 0; i+2 < len(ops) && i < 3*8; i += 3 {
		root = step(root, ops[i], ops[i+1], ops[i+2])
	}
	out, err := json.Marshal(root)
	return out, err == nil
}

// slot is a place in the tree: a map's key or a slice's index.
type slot struct {
	parent any
	key    string
	index  int
}

func (s slot) get() any {
	if m, ok := s.parent.(map[string]any); ok {
		return m[s.key]
	}
	return s.parent.([]any)[s.index]
}

func (s slot) set(v any) {
	if m, ok := s.parent.(map[string]any); ok {
		m[s.key] = v
		return
	}
	s.parent.([]any)[s.index] = v
}

func slots(v any, out []slot) []slot {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "apiVersion" || k == "kind" {
				continue
			}
			out = append(out, slot{parent: t, key: k})
			out = slots(t[k], out)
		}
	case []any:
		for i := range t {
			out = append(out, slot{parent: t, index: i})
			out = slots(t[i], out)
		}
	}
	return out
}

func step(root any, where, what, which byte) any {
	all := slots(root, nil)
	if what%5 == 3 || len(all) == 0 {
		graft(root, catalog[int(which)%len(catalog)])
		return root
	}
	s := all[int(where)%len(all)]
	switch what % 5 {
	case 0:
		switch v := s.get().(type) {
		case string:
			s.set(strs[int(which)%len(strs)])
		case float64:
			s.set(nums[int(which)%len(nums)])
		case bool:
			s.set(!v)
		}
	case 1:
		if m, ok := s.parent.(map[string]any); ok {
			delete(m, s.key)
		} else {
			s.set(nil) // a null item: the decoder makes it the zero value
		}
	case 2:
		if l, ok := s.get().([]any); ok && len(l) > 0 {
			var dup any
			b, _ := json.Marshal(l[int(which)%len(l)])
			_ = json.Unmarshal(b, &dup)
			s.set(append(l, dup))
		}
	case 4:
		// Keys of the API's own structs would only be unknown fields:
		// rename in maps whose keys are data (under labels, annotations,
		// resource lists, selectors).
		if m, ok := s.parent.(map[string]any); ok && dataKeys(s.key) {
			v := m[s.key]
			delete(m, s.key)
			m[strs[int(which)%len(strs)]] = v
		}
	}
	return root
}

// dataKeys says whether a map holding key k has data for keys: a guess
// from k itself, since the tree has no types. A struct field renamed is
// an unknown field the strict decoder refuses, so a wrong guess costs a
// mutant, not a false difference.
func dataKeys(k string) bool {
	return strings.ContainsAny(k, "./-") || k == "cpu" || k == "memory" || k == "app" || k == "a"
}

// graft sets a catalog field, making the maps on its way; an index past
// a list's end is skipped.
func graft(root any, f struct{ path, value string }) {
	var v any
	if err := json.Unmarshal([]byte(f.value), &v); err != nil {
		panic(f.path + ": " + err.Error())
	}
	parts := strings.Split(f.path, ".")
	cur := root
	for i, p := range parts {
		last := i == len(parts)-1
		switch t := cur.(type) {
		case map[string]any:
			if last {
				t[p] = v
				return
			}
			next, ok := t[p]
			if !ok {
				next = map[string]any{}
				t[p] = next
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(p)
			if err != nil || n >= len(t) {
				return
			}
			if last {
				t[n] = v
				return
			}
			cur = t[n]
		default:
			return
		}
	}
}
