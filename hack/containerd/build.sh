#!/usr/bin/env bash
# Builds containerd 2.x (containerd and containerd-shim-runc-v2) from the
# pinned tools module into a cache directory (a few minutes cold; instant
# when cached) and prints that directory. runc is Debian's.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VERSION=$(awk '$1=="require" && $2=="github.com/containerd/containerd/v2" {print $3}' "$HERE/tools/go.mod")
BIN=${NODELET_CACHE:-/var/cache/nodelet}/containerd-$VERSION
mkdir -p "$BIN"
for cmd in containerd containerd-shim-runc-v2; do
	if [ ! -x "$BIN/$cmd" ]; then
		echo "building $cmd $VERSION (cached in $BIN)" >&2
		# No btrfs snapshotter (it needs C headers the tests do not use).
		(cd "$HERE/tools" && CGO_ENABLED=0 go build -trimpath -tags no_btrfs,no_devmapper,no_zfs \
			-ldflags "-X github.com/containerd/containerd/v2/version.Version=$VERSION" \
			-o "$BIN/$cmd.new" "github.com/containerd/containerd/v2/cmd/$cmd")
		mv "$BIN/$cmd.new" "$BIN/$cmd"
	fi
done
echo "$BIN"
