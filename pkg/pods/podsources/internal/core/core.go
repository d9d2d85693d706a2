// Package core mirrors, type for type, the part of k8s.io/api/core/v1 that
// a Pod reaches, under the package name the upstream kubelet's internal
// API types have. A static pod's UID is a hash of the pod's dump, and a
// dump names each type as package.Name: seen through these types, a v1
// pod dumps exactly as upstream's internal pod does, so nodelet gives a
// static pod the same UID as the upstream kubelet (see
// pkg/pods/podsources/static.go). zz_generated.go is written by hack/coremirror;
// TestLayoutIsV1s proves the two sets of types share one layout.
package core

import (
	"unsafe"

	v1 "k8s.io/api/core/v1"
)

//go:generate go run ../../../../../hack/coremirror -out zz_generated.go

// FromV1 returns pod seen through the mirror types. It is the same
// memory, not a copy, as upstream's own v1-to-internal conversion is.
func FromV1(pod *v1.Pod) *Pod {
	return (*Pod)(unsafe.Pointer(pod))
}
