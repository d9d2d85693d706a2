//go:build tools

// Package tools pins the containerd commands hack/containerd/build.sh
// builds, and the runc they run: Debian's 1.1 cannot make idmapped mounts,
// without which containerd gives pods no user namespaces.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/opencontainers/runc"
)
