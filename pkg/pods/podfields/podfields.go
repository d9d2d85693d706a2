// Package podfields is nodelet's rule that every pod field is honoured
// or the pod refused naming it: the table of what nodelet does with each
// field of a v1 Pod (Fields), the admission check that refuses a pod
// setting a field nodelet cannot honour (Unsupported), and the
// docs/pod-fields.md written from the table.
package podfields

import (
	"reflect"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Support is what nodelet does with a field.
type Support int

const (
	// Honoured: nodelet does what the field says.
	Honoured Support = iota
	// Reported: a status field nodelet writes.
	Reported
	// Elsewhere: another component's field (the API server, the
	// scheduler, a controller); a node has nothing to do with it, as
	// upstream's kubelet has not.
	Elsewhere
	// Refused: a pod setting it is refused at admission, naming it.
	Refused
	// Unreported: a status field nodelet does not write.
	Unreported
)

func (s Support) String() string {
	return [...]string{"honoured", "reported", "another component's", "refused", "not reported"}[s]
}

// Field is one row of the table.
type Field struct {
	Support Support
	Note    string
}

// containerLists hold v1.Container fields, classified once under
// spec.containers[].
var containerLists = []string{"spec.initContainers[]", "spec.ephemeralContainers[]"}

// Lookup finds the row covering a field path: the longest path in
// Fields that is the field or one of its parents.
func Lookup(path string) (string, Field, bool) {
	for _, p := range candidates(path) {
		for q := p; q != ""; q = parent(q) {
			if f, ok := Fields[q]; ok {
				return q, f, true
			}
		}
	}
	return "", Field{}, false
}

// parent is the field holding a path: a list's items belong to the list.
func parent(path string) string {
	if list, ok := strings.CutSuffix(path, "[]"); ok {
		return list
	}
	i := strings.LastIndex(path, ".")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// candidates are the paths a field may be classified under: for a field
// of an init or ephemeral container the same field of spec.containers[]
// first, then the field itself.
func candidates(path string) []string {
	for _, list := range containerLists {
		if rest, ok := strings.CutPrefix(path, list+"."); ok {
			return []string{"spec.containers[]." + rest, path}
		}
	}
	return []string{path}
}

// Unsupported returns the first field the pod sets that nodelet refuses,
// with why, or "" when it sets none. Only set fields count: a refused
// field left empty is no reason to refuse the pod.
func Unsupported(pod *v1.Pod) (path, why string) {
	walkValue(reflect.ValueOf(&pod.Spec).Elem(), "spec", func(p string) bool {
		if _, f, ok := Lookup(p); ok && f.Support == Refused {
			path, why = p, f.Note
			return false
		}
		return true
	})
	return path, why
}

// walkValue calls visit with the path of every set field under v, parents
// before their fields, until visit returns false.
func walkValue(v reflect.Value, prefix string, visit func(path string) bool) bool {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return true
		}
		v = v.Elem()
	}
	if v.IsZero() || ((v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0) {
		return true
	}
	if !visit(prefix) {
		return false
	}
	switch {
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() != reflect.Uint8:
		for i := 0; i < v.Len(); i++ {
			if !walkValue(v.Index(i), prefix+"[]", visit) {
				return false
			}
		}
	case v.Kind() == reflect.Struct && !leafTypes[v.Type()]:
		return walkFields(v, prefix, visit)
	}
	return true
}

func walkFields(v reflect.Value, prefix string, visit func(path string) bool) bool {
	return eachField(v.Type(), func(i int, name string, inline bool) bool {
		if !inline {
			return walkValue(v.Field(i), prefix+"."+name, visit)
		}
		fv := reflect.Indirect(v.Field(i))
		return !fv.IsValid() || fv.Kind() != reflect.Struct || walkFields(fv, prefix, visit)
	})
}
