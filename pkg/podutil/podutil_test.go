package podutil

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestFullName(t *testing.T) {
	p := &v1.Pod{}
	p.Name, p.Namespace = "web-node1", "kube-system"
	full := FullName(p)
	name, ns, err := ParseFullName(full)
	if err != nil || name != p.Name || ns != p.Namespace {
		t.Fatalf("round trip of %q: %q %q %v", full, name, ns, err)
	}
	for _, bad := range []string{"", "noseparator", "_ns", "name_", "a_b_c"} {
		if _, _, err := ParseFullName(bad); err == nil {
			t.Errorf("ParseFullName(%q) succeeded", bad)
		}
	}
}

func TestSourceKinds(t *testing.T) {
	p := &v1.Pod{}
	if IsStatic(p) || IsMirror(p) {
		t.Fatal("a pod without annotations is neither static nor a mirror")
	}
	p.Annotations = map[string]string{ConfigSourceAnnotationKey: FileSource}
	if !IsStatic(p) {
		t.Fatal("file pod not static")
	}
	p.Annotations[ConfigSourceAnnotationKey] = APISource
	if IsStatic(p) {
		t.Fatal("API pod static")
	}
	p.Annotations[ConfigMirrorAnnotationKey] = "hash"
	if !IsMirror(p) {
		t.Fatal("mirror not recognised")
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]v1.PullPolicy{
		"busybox":                         v1.PullAlways,
		"busybox:latest":                  v1.PullAlways,
		"busybox:1.36":                    v1.PullIfNotPresent,
		"localhost:5000/busybox":          v1.PullAlways,
		"localhost:5000/busybox:1":        v1.PullIfNotPresent,
		"busybox@sha256:0123456789abcdef": v1.PullIfNotPresent,
		"busybox:latest@sha256:" + strings.Repeat("a", 64): v1.PullAlways,
		"busybox@sha256:" + strings.Repeat("a", 64):        v1.PullIfNotPresent,
		"Busybox": v1.PullIfNotPresent, // not a reference: no tag
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("%s: %s, want %s", image, got, want)
		}
	}
}

func TestGracePeriodSeconds(t *testing.T) {
	p := &v1.Pod{}
	if GracePeriodSeconds(p) != 30 {
		t.Fatal("default is not 30")
	}
	spec, del := int64(10), int64(3)
	p.Spec.TerminationGracePeriodSeconds = &spec
	if GracePeriodSeconds(p) != 10 {
		t.Fatal("spec ignored")
	}
	p.DeletionGracePeriodSeconds = &del
	if GracePeriodSeconds(p) != 3 {
		t.Fatal("deletion grace period ignored")
	}
}
