package podfields

import (
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// leafTypes are structs read as one value, not field by field.
var leafTypes = map[reflect.Type]bool{
	reflect.TypeOf(resource.Quantity{}):    true,
	reflect.TypeOf(metav1.Time{}):          true,
	reflect.TypeOf(metav1.MicroTime{}):     true,
	reflect.TypeOf(intstr.IntOrString{}):   true,
	reflect.TypeOf(metav1.Duration{}):      true,
	reflect.TypeOf(metav1.FieldsV1{}):      true,
	reflect.TypeOf(metav1.LabelSelector{}): true,
}

// jsonName is a struct field's JSON name, "" for an inlined one.
func jsonName(f reflect.StructField) (name string, inline bool) {
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "-" {
		return "", false
	}
	if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

// Paths lists the JSON paths of every field under t: "spec.containers[].name".
func Paths(t reflect.Type) []string {
	var out []string
	walkType(t, "", &out)
	return out
}

func walkType(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8:
		walkType(t.Elem(), prefix+"[]", out)
		return
	case t.Kind() != reflect.Struct || leafTypes[t]:
		*out = append(*out, prefix)
		return
	}
	eachField(t, func(i int, name string, inline bool) bool {
		f := t.Field(i)
		if inline {
			walkType(f.Type, prefix, out)
			return true
		}
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		walkType(f.Type, p, out)
		return true
	})
}

// eachField calls fn with each exported field of a struct type that JSON
// carries: its index, JSON name, and whether it is inlined; until fn
// returns false.
func eachField(t reflect.Type, fn func(i int, name string, inline bool) bool) bool {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, inline := jsonName(f)
		if (inline || name != "") && !fn(i, name, inline) {
			return false
		}
	}
	return true
}
