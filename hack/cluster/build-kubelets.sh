#!/usr/bin/env bash
# Builds the upstream kubelets of the previous minor versions (pinned in
# hack/cluster/kubelet-v1.NN) that the upgrade tests hand a node over from,
# into a cache directory each (about 5 minutes each cold; instant when
# cached), and prints those directories, one a line.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
for mod in "$HERE"/kubelet-v*/; do
	VERSION=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3} $1=="k8s.io/kubernetes" {print $2}' "$mod/go.mod")
	[ -n "$VERSION" ] || { echo "hack/cluster/build-kubelets.sh: no k8s.io/kubernetes version in $mod/go.mod" >&2; exit 1; }
	BIN=${NODELET_CACHE:-/var/cache/nodelet}/kubelet-$VERSION
	mkdir -p "$BIN"
	# A kubelet built before the version was stamped is built again.
	if [ -x "$BIN/kubelet" ] && ! "$BIN/kubelet" --version | grep -qF "$VERSION"; then
		rm -f "$BIN/kubelet"
	fi
	if [ ! -x "$BIN/kubelet" ]; then
		echo "building kubelet $VERSION (cached in $BIN)" >&2
		# The version the node reports (status.nodeInfo.kubeletVersion), as
		# upstream's release build stamps it.
		minor=${VERSION#v1.}; minor=${minor%%.*}
		ldflags="-X k8s.io/component-base/version.gitVersion=$VERSION -X k8s.io/component-base/version.gitMajor=1"
		ldflags="$ldflags -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
		(cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN/kubelet.new" k8s.io/kubernetes/cmd/kubelet)
		mv "$BIN/kubelet.new" "$BIN/kubelet"
	fi
	echo "$BIN"
done
