#!/usr/bin/env bash
# Builds the upstream control plane, kubectl, kubeadm (whose generated
# configuration the tests start nodelet with), the kubelet (for the tests
# that move a node between it and nodelet), the sample device plugin and
# the DRA test driver (the device tests' peers) from the pinned tools module
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
# name=package: the binaries, and the device tests' reference peers
# (upstream's sample device plugin and DRA test driver).
for pair in kube-apiserver=cmd/kube-apiserver kube-controller-manager=cmd/kube-controller-manager \
	kube-scheduler=cmd/kube-scheduler kubectl=cmd/kubectl kubelet=cmd/kubelet kubeadm=cmd/kubeadm \
	sample-device-plugin=test/images/sample-device-plugin dra-test-driver=test/e2e/dra/test-driver; do
	cmd=${pair%%=*}
	if [ ! -x "$BIN/$cmd" ]; then
		echo "building $cmd $VERSION (cached in $BIN)" >&2
		(cd "$HERE/tools" && CGO_ENABLED=0 go build -trimpath -o "$BIN/$cmd.new" "k8s.io/kubernetes/${pair#*=}")
		mv "$BIN/$cmd.new" "$BIN/$cmd"
	fi
done
echo "$BIN"
