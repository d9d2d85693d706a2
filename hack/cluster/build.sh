#!/usr/bin/env bash
# Builds the upstream control plane, kubectl, kubeadm (whose generated
# configuration the tests start nodelet with) and the kubelet (for the tests
# that move a node between it and nodelet) from the pinned tools module
# into a cache directory (about 7 minutes cold; instant when cached) and
# prints that directory.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# The pinned version, whether go.mod requires it on one line or in a
# block: the cache is keyed by it, so a new pin builds anew.
VERSION=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3} $1=="k8s.io/kubernetes" {print $2}' "$HERE/tools/go.mod")
[ -n "$VERSION" ] || { echo "hack/cluster/build.sh: no k8s.io/kubernetes version in tools/go.mod" >&2; exit 1; }
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
