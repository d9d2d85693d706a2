#!/usr/bin/env bash
# Builds the upstream control plane, kubectl, kubeadm (whose generated
# configuration the tests start nodelet with) and the kubelet (for the tests
# that move a node between it and nodelet) from the pinned tools module
# into a cache directory (about 7 minutes cold; instant when cached) and
# prints that directory.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VERSION=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$HERE/tools/go.mod")
BIN=${NODELET_CACHE:-/var/cache/nodelet}/kubernetes-$VERSION
mkdir -p "$BIN"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kubeadm; do
	if [ ! -x "$BIN/$cmd" ]; then
		echo "building $cmd $VERSION (cached in $BIN)" >&2
		(cd "$HERE/tools" && CGO_ENABLED=0 go build -trimpath -o "$BIN/$cmd.new" "k8s.io/kubernetes/cmd/$cmd")
		mv "$BIN/$cmd.new" "$BIN/$cmd"
	fi
done
echo "$BIN"
