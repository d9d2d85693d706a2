#!/usr/bin/env bash
# Sets the machine up if needed, builds nodelet and runs a one-node cluster:
# the upstream control plane on loopback ports with nodelet as its node.
# Do not run it alongside the standalone demo: both own the node's pods.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash hack/setup.sh --cluster
go build -ldflags "-s -w" -o _output/nodelet ./cmd/nodelet
exec go run ./hack/cluster/up "$@"
