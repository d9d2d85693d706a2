//go:build tools

// Package tools pins the containerd commands hack/containerd/build.sh
// builds.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
)
