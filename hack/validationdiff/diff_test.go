// Package validationdiff checks nodelet's validation of static and HTTP
// pods (podsources.Validate) against the API server's pod-create
// validation as the upstream kubelet runs it on the same pods
// (pkg/kubelet/config: the legacy scheme's defaults, the static identity,
// then validation.ValidatePodCreate): for every pod, upstream refuses it
// if and only if nodelet does, and both name the same first field path.
//
//	go test ./...                                  # the corpus
//	go test -run '^$' -fuzz FuzzValidation -fuzztime 30m
//
// The corpus (testdata/corpus, one manifest per file) is valid and invalid
// pods after upstream's validation test tables. TestMutants checks a fixed
// series of mutants of it (mutate_test.go), so the run is repeatable; the
// fuzzer searches further and keeps what it finds in testdata/fuzz.
package validationdiff

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/core/helper"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	"k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/capabilities"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/pkg/pods/podsources"
)

const node = "node1"

// upstream is what the upstream kubelet's file source finds in a pod.
func upstream(t testing.TB, pod *v1.Pod) field.ErrorList {
	v := pod.DeepCopy()
	legacyscheme.Scheme.Default(v)
	p := &api.Pod{}
	if err := legacyscheme.Scheme.Convert(v, p, nil); err != nil {
		t.Fatalf("converting to the internal pod: %v", err)
	}
	// The static identity (pkg/kubelet/config applyDefaults), but the UID:
	// validation does not read it.
	p.UID = "0123456789abcdef0123456789abcdef"
	p.Name = p.Name + "-" + node
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	p.Spec.NodeName = node
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations["kubernetes.io/config.hash"] = string(p.UID)
	helper.AddOrUpdateTolerationInPod(p, &api.Toleration{Operator: "Exists", Effect: api.TaintEffectNoExecute})
	opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&p.Spec, nil, &p.ObjectMeta, nil)
	return validation.ValidatePodCreate(p, opts)
}

func init() {
	// As the upstream kubelet starts (cmd/kubelet/app): privileged
	// containers are allowed.
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: true})
}

// check is the answer for one pod: "" when both agree.
func check(t testing.TB, pod *v1.Pod) string {
	return differ(upstream(t, pod), podsources.Validate(pod, node))
}

// differ says how the two answers differ, or "".
func differ(up, ours field.ErrorList) string {
	switch {
	case len(up) == 0 && len(ours) == 0:
		return ""
	case len(up) == 0:
		return "nodelet refuses a pod upstream accepts: " + ours[0].Error()
	case len(ours) == 0:
		return "nodelet accepts a pod upstream refuses: " + up[0].Error()
	case up[0].Field != ours[0].Field && !mapOrder(up, ours):
		return "first field path: upstream " + up[0].Error() + "; nodelet " + ours[0].Error()
	}
	return ""
}

// maps are the fields that are Go maps in the API's types: the API
// server walks them (resource lists, labels, annotations, options) in
// Go's random order.
var maps = regexp.MustCompile(`(\.limits|\.requests|\.overhead|\.labels|\.annotations|\.nodeSelector|\.matchLabels|\.options|\.userAnnotations)$`)

// mapOrder says whether the first paths differ only as the order of a
// map's keys: which of two bad keys comes first is chance at the API
// server. Each path must be the map's own or one of its keys' (a key may
// hold brackets itself), and each answer must hold the other's first
// path.
func mapOrder(up, ours field.ErrorList) bool {
	a, b := up[0].Field, ours[0].Field
	if a == b {
		return false
	}
	parent := commonMap(a, b)
	if parent == "" {
		return false
	}
	has := func(l field.ErrorList, f string) bool {
		for _, e := range l {
			if e.Field == f {
				return true
			}
		}
		return false
	}
	return has(up, b) && has(ours, a)
}

// commonMap is the map both paths are in (the map itself, or a key of
// it), or "".
func commonMap(a, b string) string {
	for i := len(a); i > 0; i-- {
		p := a[:i]
		if !maps.MatchString(p) {
			continue
		}
		in := func(f string) bool {
			return f == p || strings.HasPrefix(f, p+"[")
		}
		if in(a) && in(b) {
			return p
		}
	}
	return ""
}

func decode(data []byte) (*v1.Pod, bool) {
	pod := &v1.Pod{}
	if err := yaml.UnmarshalStrict(data, pod); err != nil {
		return nil, false // upstream's source refuses it before validation too
	}
	return pod, true
}

// corpus is the corpus pods as JSON, by name.
func corpus(t testing.TB) map[string][]byte {
	files, err := filepath.Glob("testdata/corpus/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus (%v)", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = j
	}
	return out
}

// TestCorpus: every pod of the corpus gets the same answer, and the
// corpus holds both valid and invalid pods (named valid-* and invalid-*).
func TestCorpus(t *testing.T) {
	for name, data := range corpus(t) {
		t.Run(name, func(t *testing.T) {
			pod, ok := decode(data)
			if !ok {
				t.Fatal("the corpus pod does not decode")
			}
			up := upstream(t, pod)
			if strings.HasPrefix(name, "valid-") != (len(up) == 0) {
				t.Fatalf("the corpus names it %s, upstream says %v", name, up)
			}
			if d := differ(up, podsources.Validate(pod, node)); d != "" {
				t.Error(d)
			}
		})
	}
}

// names is the corpus's names in order: the fuzzer's seed picks by index.
func names(c map[string][]byte) []string {
	out := make([]string, 0, len(c))
	for n := range c {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// mutants is how many mutants TestMutants checks (-mutants).
var mutants = 50000

// TestMutants checks a fixed series of mutants of the corpus: the same
// every run, so a difference it finds is found again.
func TestMutants(t *testing.T) {
	c := corpus(t)
	ns := names(c)
	rng := rand.New(rand.NewSource(1))
	decoded, failed, refused := 0, 0, 0
	paths := map[string]bool{} // the distinct first paths upstream refused for
	for i := 0; i < mutants && failed < 20; i++ {
		seed := uint8(rng.Intn(256))
		ops := make([]byte, 3*(1+rng.Intn(4)))
		rng.Read(ops)
		data, ok := mutate(c[ns[int(seed)%len(ns)]], ops)
		if !ok {
			continue
		}
		pod, ok := decode(data)
		if !ok {
			continue
		}
		decoded++
		up := upstream(t, pod)
		if len(up) > 0 {
			refused++
			paths[up[0].Field] = true
		}
		if d := differ(up, podsources.Validate(pod, node)); d != "" {
			failed++
			t.Errorf("mutant %d (seed %d, ops %x): %s\n%s", i, seed, ops, d, data)
		}
	}
	t.Logf("%d mutants decoded of %d; upstream refused %d, for %d distinct first field paths", decoded, mutants, refused, len(paths))
	if decoded < mutants/2 {
		t.Fatalf("only %d of %d mutants decode: the mutator is broken", decoded, mutants)
	}
	// Both verdicts must be common, or agreement proves little.
	if refused < decoded/4 || decoded-refused < decoded/20 {
		t.Fatalf("%d of %d mutants refused: the series tests one verdict only", refused, decoded)
	}
}

// FuzzValidation: a corpus pod (by index), mutated by ops.
func FuzzValidation(f *testing.F) {
	c := corpus(f)
	ns := names(c)
	for i := range ns {
		f.Add(uint8(i), []byte{})
	}
	f.Fuzz(func(t *testing.T, seed uint8, ops []byte) {
		data, ok := mutate(c[ns[int(seed)%len(ns)]], ops)
		if !ok {
			return
		}
		pod, ok := decode(data)
		if !ok {
			return
		}
		if d := check(t, pod); d != "" {
			t.Error(fmt.Sprintf("%s\n%s", d, data))
		}
	})
}
