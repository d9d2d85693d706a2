// Package project copies a v1 pod into an older kubelet's internal types
// as that kubelet's conversion would: by field name (what both have is
// copied, nil stays nil and empty stays empty, what the older types lack
// is left out), then the few places where internal and v1 differ before
// v1.37. The static pod UIDs of older kubelets are hashes of a pod's dump
// in their own types (pkg/pods/podsources/internal/core/v1_NN).
package project

import (
	"fmt"
	"reflect"

	v1 "k8s.io/api/core/v1"
)

// As returns pod as an older kubelet's internal Pod type T (see Pod).
func As[T any](pod *v1.Pod) *T {
	out := new(T)
	Pod(out, pod)
	return out
}

// Pod copies pod into *dst, a zero internal Pod of an older kubelet, as
// its v1-to-internal conversion does: the host namespace fields go into
// the (then always present) pod security context, and the deprecated
// service account name stands in for an empty one.
func Pod(dst any, pod *v1.Pod) {
	Into(dst, pod)
	spec := reflect.ValueOf(dst).Elem().FieldByName("Spec")
	if pod.Spec.ServiceAccountName == "" {
		spec.FieldByName("ServiceAccountName").SetString(pod.Spec.DeprecatedServiceAccount)
	}
	sc := spec.FieldByName("SecurityContext")
	if sc.IsNil() {
		sc.Set(reflect.New(sc.Type().Elem()))
	}
	host := map[string]any{"HostNetwork": pod.Spec.HostNetwork, "HostPID": pod.Spec.HostPID, "HostIPC": pod.Spec.HostIPC,
		"ShareProcessNamespace": pod.Spec.ShareProcessNamespace, "HostUsers": pod.Spec.HostUsers}
	for name, v := range host {
		if f := sc.Elem().FieldByName(name); f.IsValid() {
			f.Set(reflect.ValueOf(v))
		}
	}
}

// Into copies src into *dst (a pointer to a zero value).
func Into(dst, src any) {
	into(reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem())
}

func into(dst, src reflect.Value) {
	if dst.Type() == src.Type() {
		dst.Set(src) // a type both versions share (apimachinery's)
		return
	}
	if src.Kind() == reflect.Pointer && dst.Kind() != reflect.Pointer {
		// A field optional in v1 and not internally (a projected token's
		// expirationSeconds): nil is the zero value.
		if !src.IsNil() {
			into(dst, src.Elem())
		}
		return
	}
	switch src.Kind() {
	case reflect.Struct:
		for i := range dst.NumField() {
			if f := src.FieldByName(dst.Type().Field(i).Name); f.IsValid() {
				into(dst.Field(i), f)
			}
		}
	case reflect.Pointer:
		if !src.IsNil() {
			dst.Set(reflect.New(dst.Type().Elem()))
			into(dst.Elem(), src.Elem())
		}
	case reflect.Slice:
		if !src.IsNil() {
			dst.Set(reflect.MakeSlice(dst.Type(), src.Len(), src.Len()))
			for i := range src.Len() {
				into(dst.Index(i), src.Index(i))
			}
		}
	case reflect.Map:
		if !src.IsNil() {
			dst.Set(reflect.MakeMapWithSize(dst.Type(), src.Len()))
			for it := src.MapRange(); it.Next(); {
				k, v := reflect.New(dst.Type().Key()).Elem(), reflect.New(dst.Type().Elem()).Elem()
				into(k, it.Key())
				into(v, it.Value())
				dst.SetMapIndex(k, v)
			}
		}
	default:
		if !src.Type().ConvertibleTo(dst.Type()) {
			panic(fmt.Sprintf("project: %s cannot become %s", src.Type(), dst.Type()))
		}
		dst.Set(src.Convert(dst.Type()))
	}
}
