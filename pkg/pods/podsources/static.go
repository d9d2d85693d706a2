package podsources

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/dump"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
	"github.com/nodelet/nodelet/pkg/pods/podsources/internal/core"
	core135 "github.com/nodelet/nodelet/pkg/pods/podsources/internal/core/v1_35"
	core136 "github.com/nodelet/nodelet/pkg/pods/podsources/internal/core/v1_36"
	"github.com/nodelet/nodelet/pkg/pods/podsources/internal/project"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// decoder reads Pods and PodLists, in YAML or JSON, checking apiVersion
// and kind. It applies no defaults: nodelet applies its own (defaults.go).
var decoder = kubeclient.Codecs.UniversalDeserializer()

// maxManifestBytes bounds what nodelet reads from one manifest.
const maxManifestBytes = 10 << 20

// decodePods parses a manifest holding one Pod or a PodList.
func decodePods(data []byte) ([]*v1.Pod, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, fmt.Errorf("manifest is empty")
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("manifest is larger than %d bytes", maxManifestBytes)
	}
	obj, gvk, err := decoder.Decode(data, nil, nil)
	switch {
	case runtime.IsMissingVersion(err):
		return nil, fmt.Errorf("manifest has no apiVersion")
	case runtime.IsMissingKind(err):
		return nil, fmt.Errorf("manifest has no kind")
	case err != nil:
		// Decoders quote the input in some errors: keep one line of it.
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return nil, fmt.Errorf("cannot decode manifest: %s", msg)
	}
	switch o := obj.(type) {
	case *v1.Pod:
		return []*v1.Pod{o}, nil
	case *v1.PodList:
		pods := make([]*v1.Pod, len(o.Items))
		for i := range o.Items {
			pods[i] = &o.Items[i]
		}
		return pods, nil
	default:
		return nil, fmt.Errorf("manifest holds a %s, want a v1 Pod or PodList", kindOf(gvk, obj))
	}
}

func kindOf(gvk *schema.GroupVersionKind, obj runtime.Object) string {
	if gvk != nil && gvk.Kind != "" {
		return gvk.GroupVersion().String() + " " + gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

// staticPod turns a decoded manifest pod into the pod nodelet runs: API
// defaults applied, then the static identity upstream gives it. The UID is
// a hash of the defaulted pod, the node and the source, so the same
// content keeps its UID (nothing restarts when a file is touched or
// reformatted) and changed content gets a new one (the old pod is
// replaced). source is the manifest path or URL.
//
// The hash is the upstream kubelet's, so a node moved between the two
// keeps its static pods running: FNV-128a over the dump
// (k8s.io/utils/dump.ForHash) of the defaulted pod as upstream's internal
// type (package core, no apiVersion or kind), then "host:<node>" and
// "file:<path>" (or "url:<url>"), in hex.
func staticPod(pod *v1.Pod, nodeName, source string, isFile bool) (*v1.Pod, error) {
	pod = pod.DeepCopy()
	setDefaults(pod)
	name := pod.Name
	if pod.UID == "" {
		pod.UID = staticPodUID(pod, nodeName, source, isFile)
	}
	applyStaticIdentity(pod, nodeName, isFile)
	if errs := validatePod(pod); len(errs) > 0 {
		return nil, fmt.Errorf("invalid pod %q: %w", name, errs.ToAggregate())
	}
	pod.Status = v1.PodStatus{Phase: v1.PodPending}
	return pod, nil
}

// applyStaticIdentity names a defaulted manifest pod as upstream names
// it, before validating it as the API server would (so the name's limits
// hold for the name the pod is known by): the node's name appended, the
// default namespace, the node, the hash annotation and, for manifest
// files, the toleration of every NoExecute taint.
func applyStaticIdentity(pod *v1.Pod, nodeName string, isFile bool) {
	pod.Name = pod.Name + "-" + strings.ToLower(nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[podutil.ConfigHashAnnotationKey] = string(pod.UID)
	if isFile {
		// Node problems must not evict the node's own static pods.
		addToleration(pod, v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute})
	}
}

// Static names the pods of the static sources (manifest files and URL).
type Static struct {
	NodeName string
	// Running are the UIDs of the pods whose containers ran when nodelet
	// started. A static pod that one of the upstream kubelets nodelet
	// takes over from (v1.35 and v1.36, whose UIDs hash their own types)
	// started keeps that UID while its manifest is unchanged, so handing
	// the node over restarts nothing.
	Running map[types.UID]bool
}

// pod is staticPod, keeping the UID an earlier kubelet gave the pod if
// it runs under it.
func (n Static) pod(pod *v1.Pod, source string, isFile bool) (*v1.Pod, error) {
	sp, err := staticPod(pod, n.NodeName, source, isFile)
	if err != nil || pod.UID != "" || n.Running[sp.UID] {
		return sp, err
	}
	// The UID is hashed from the defaulted manifest pod, as staticPod's.
	defaulted := pod.DeepCopy()
	setDefaults(defaulted)
	for _, earlier := range earlierNamings {
		uid := earlier.uid(defaulted, n.NodeName, source, isFile)
		if n.Running[uid] {
			klog.InfoS("Static pod keeps the UID an earlier kubelet gave it", "pod", klog.KObj(sp), "podUID", uid, "kubelet", earlier.kubelet, "source", source)
			sp.UID = uid
			sp.Annotations[podutil.ConfigHashAnnotationKey] = string(uid)
			break
		}
	}
	return sp, nil
}

// earlierNamings are how the kubelets nodelet takes over from named a
// defaulted static pod: the upstream kubelets v1.36 and v1.35 (upstream's
// hash over their own internal types, see internal/core), and nodelet
// before it named static pods as upstream does.
var earlierNamings = []struct {
	kubelet string
	uid     func(defaulted *v1.Pod, nodeName, source string, isFile bool) types.UID
}{
	{"v1.36", func(p *v1.Pod, node, source string, isFile bool) types.UID {
		return hashStatic(project.As[core136.Pod](untyped(p)), node, source, isFile)
	}},
	{"v1.35", func(p *v1.Pod, node, source string, isFile bool) types.UID {
		return hashStatic(project.As[core135.Pod](untyped(p)), node, source, isFile)
	}},
	{"nodelet (before upstream's UIDs)", legacyStaticUID},
}

// legacyStaticUID is how nodelet named static pods before it took
// upstream's hash: MD5 over the defaulted pod's JSON, then the node and
// the source.
func legacyStaticUID(p *v1.Pod, nodeName, source string, isFile bool) types.UID {
	b, err := json.Marshal(p)
	if err != nil {
		return ""
	}
	h := md5.New()
	h.Write(b)
	writeSource(h, nodeName, source, isFile)
	return types.UID(hex.EncodeToString(h.Sum(nil)))
}

func staticPodUID(pod *v1.Pod, nodeName, source string, isFile bool) types.UID {
	return hashStatic(core.FromV1(untyped(pod)), nodeName, source, isFile)
}

// untyped is a shallow copy of pod without apiVersion and kind, which an
// internal object has not.
func untyped(pod *v1.Pod) *v1.Pod {
	c := *pod
	c.TypeMeta = metav1.TypeMeta{}
	return &c
}

// hashStatic is upstream's static pod UID: FNV-128a of the dump of the
// pod as the kubelet's internal type (which has no apiVersion or kind),
// then the node and the source.
func hashStatic(internal any, nodeName, source string, isFile bool) types.UID {
	h := fnv.New128a()
	fmt.Fprintf(h, "%v", dump.ForHash(internal))
	writeSource(h, nodeName, source, isFile)
	return types.UID(hex.EncodeToString(h.Sum(nil)))
}

// writeSource adds where a static pod comes from to its UID's hash.
func writeSource(h io.Writer, nodeName, source string, isFile bool) {
	if isFile {
		fmt.Fprintf(h, "host:%s", nodeName)
		fmt.Fprintf(h, "file:%s", source)
	} else {
		fmt.Fprintf(h, "url:%s", source)
	}
}

func addToleration(pod *v1.Pod, t v1.Toleration) {
	for _, e := range pod.Spec.Tolerations {
		if e.MatchToleration(&t) {
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
}
