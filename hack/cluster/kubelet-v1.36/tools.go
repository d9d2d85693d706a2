//go:build tools

// Package tools pins the upstream kubelet v1.36 that the upgrade tests hand
// a node over from (make test-upgrades), and its static pod UIDs
// (staticuid, shared with ../tools).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
