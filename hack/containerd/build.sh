#!/usr/bin/env bash
# Builds containerd 2.x (containerd and containerd-shim-runc-v2) and runc
# (with seccomp, cgo and libseccomp-dev) from the pinned tools module into
# a cache directory (a few minutes cold; instant when cached) and prints
# that directory; the test bed puts it first in containerd's PATH, so the
# shim runs this runc, which can make idmapped mounts (user namespaces).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# A module's version in the tools module: "require m v" or a block's "m v".
version() { awk -v m="$1" '$1=="require" && $2==m {print $3} $1==m {print $2}' "$HERE/tools/go.mod"; }
VERSION=$(version github.com/containerd/containerd/v2)
[ -n "$VERSION" ] || { echo "hack/containerd/build.sh: no containerd version in tools/go.mod" >&2; exit 1; }
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
RUNC=$(version github.com/opencontainers/runc)
if [ ! -x "$BIN/runc" ] || ! "$BIN/runc" --version | grep -q "${RUNC#v}"; then
	echo "building runc $RUNC (cached in $BIN)" >&2
	(cd "$HERE/tools" && CGO_ENABLED=1 go build -trimpath -tags seccomp -o "$BIN/runc.new" github.com/opencontainers/runc)
	mv "$BIN/runc.new" "$BIN/runc"
fi
echo "$BIN"
