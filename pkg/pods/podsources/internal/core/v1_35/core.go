// Package core mirrors the v1.35 kubelet's internal Pod types, as package
// ../core does v1.37's: a static pod's UID under that kubelet is the hash
// of its dump in these types. zz_generated.go is written by hack/coremirror
// run from hack/cluster/kubelet-v1.35; internal/project converts a v1 pod
// into them.
package core

//go:generate sh -c "cd ../../../../../../hack/cluster/kubelet-v1.35 && go run ./coremirror -out ../../../pkg/pods/podsources/internal/core/v1_35/zz_generated.go"
