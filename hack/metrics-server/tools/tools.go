//go:build tools

// Package tools pins metrics-server.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
