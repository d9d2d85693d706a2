package core

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// The mirror types have v1's layout, field for field, so FromV1's pointer
// cast is sound; a k8s.io/api upgrade that adds a field fails here until
// go generate runs again.
func TestLayoutIsV1s(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var compare func(a, b reflect.Type, path string)
	compare = func(a, b reflect.Type, path string) {
		if seen[a] {
			return
		}
		seen[a] = true
		if a.Kind() != b.Kind() || a.Name() != b.Name() || a.Size() != b.Size() {
			t.Fatalf("%s: v1 has %v, the mirror %v", path, a, b)
		}
		if a.PkgPath() == "k8s.io/api/core/v1" {
			if !strings.HasSuffix(b.PkgPath(), "/internal/core") {
				t.Fatalf("%s: %v is not mirrored (%s)", path, a, b.PkgPath())
			}
		} else if a.Name() != "" && a != b {
			t.Fatalf("%s: v1 has %v, the mirror %v", path, a, b)
		}
		switch a.Kind() {
		case reflect.Struct:
			if a.NumField() != b.NumField() {
				t.Fatalf("%s: v1 has %d fields, the mirror %d", path, a.NumField(), b.NumField())
			}
			for i := range a.NumField() {
				fa, fb := a.Field(i), b.Field(i)
				if fa.Name != fb.Name || fa.Anonymous != fb.Anonymous || fa.Offset != fb.Offset {
					t.Fatalf("%s: field %d is %s in v1, %s in the mirror", path, i, fa.Name, fb.Name)
				}
				compare(fa.Type, fb.Type, path+"."+fa.Name)
			}
		case reflect.Pointer, reflect.Slice, reflect.Array:
			compare(a.Elem(), b.Elem(), path+"[]")
		case reflect.Map:
			compare(a.Key(), b.Key(), path+"[key]")
			compare(a.Elem(), b.Elem(), path+"[value]")
		}
	}
	compare(reflect.TypeOf(v1.Pod{}), reflect.TypeOf(Pod{}), "Pod")
	if len(seen) < 150 {
		t.Fatalf("compared only %d types", len(seen))
	}
}

func TestFromV1SharesThePod(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", Image: "busybox"}}}}
	c := FromV1(pod)
	if c.Spec.Containers[0].Name != "a" || c.Spec.Containers[0].Image != "busybox" {
		t.Fatalf("mirror reads %+v", c.Spec.Containers)
	}
	if got := reflect.TypeOf(c).String(); got != "*core.Pod" {
		t.Fatalf("type %s, want *core.Pod (the dump prints it)", got)
	}
}
