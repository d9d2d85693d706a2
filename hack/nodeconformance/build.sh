#!/usr/bin/env bash
# Builds what running upstream's node conformance suite against a node
# takes, from the pinned tools module (hack/cluster/tools) and Debian's
# packages, cached, and prints the directory that holds it:
#   e2e_node.test   upstream's node e2e suite (go test -c k8s.io/kubernetes/test/e2e_node)
#   ginkgo          the CLI that runs it in parallel, at the suite's ginkgo version
#   default-kubelet-config.yaml
#                   the suite's own kubelet settings (test/e2e_node/jenkins)
#   images.tar      the suite's images, under its manifest's names (hack/mkimage -e2e-out)
# Cold: about 10 minutes on 2 cores (the suite's build, and a Debian root
# filesystem debootstrapped for the images); instant when cached.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$ROOT/hack/cluster/tools
CACHE=${NODELET_CACHE:-/var/cache/nodelet}
VERSION=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3} $1=="k8s.io/kubernetes" {print $2}' "$TOOLS/go.mod")
[ -n "$VERSION" ] || { echo "hack/nodeconformance/build.sh: no k8s.io/kubernetes version in $TOOLS/go.mod" >&2; exit 1; }
BIN=$CACHE/node-e2e-$VERSION
mkdir -p "$BIN"
log() { echo "node-e2e: $*" >&2; }

gobuild() { # output, go subcommand (build, or test -c), package
	local out=$1 pkg=${*: -1}
	local cmd=("${@:2:$#-2}")
	[ -x "$BIN/$out" ] && return 0
	log "building $out ($pkg; cached in $BIN)"
	(cd "$TOOLS" && CGO_ENABLED=0 go "${cmd[@]}" -trimpath -o "$BIN/$out.new" "$pkg")
	mv "$BIN/$out.new" "$BIN/$out"
}
gobuild e2e_node.test test -c k8s.io/kubernetes/test/e2e_node
gobuild ginkgo build github.com/onsi/ginkgo/v2/ginkgo
gobuild agnhost build k8s.io/kubernetes/test/images/agnhost
gobuild nnp build k8s.io/kubernetes/test/images/nonewprivs
K8S=$(cd "$TOOLS" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
cp "$K8S/test/e2e_node/jenkins/default-kubelet-config.yaml" "$BIN/default-kubelet-config.yaml"

# busybox 1.37.0, upstream's busybox image's, from Debian's source
# archive, with every applet (defconfig, as the official image): the
# suite's scripts use applets Debian's busybox-static leaves out (nmeter).
# tc is left out: it no longer builds against current kernel headers.
BUSYBOX=$CACHE/busybox-1.37.0/busybox
if [ ! -x "$BUSYBOX" ]; then
	log "building busybox 1.37.0 (a few minutes; cached in $BUSYBOX)"
	src=$(mktemp -d)
	curl -fsSL -o "$src/busybox.tar.bz2" http://deb.debian.org/debian/pool/main/b/busybox/busybox_1.37.0.orig.tar.bz2
	echo "3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4  $src/busybox.tar.bz2" | sha256sum -c --quiet
	tar -xjf "$src/busybox.tar.bz2" -C "$src"
	(cd "$src/busybox-1.37.0" && make defconfig >/dev/null &&
		sed -i 's/^# CONFIG_STATIC is not set/CONFIG_STATIC=y/; s/^CONFIG_TC=y/# CONFIG_TC is not set/' .config &&
		make -j"$(nproc)" >"$src/build.log" 2>&1) || { tail -20 "$src/build.log" >&2; exit 1; }
	mkdir -p "$(dirname "$BUSYBOX")"
	mv "$src/busybox-1.37.0/busybox" "$BUSYBOX"
	rm -rf "$src"
fi

# The Debian layer of the images built on Debian (agnhost, nginx,
# ipc-utils, glibc-dns-testing, nonroot), keyed by what goes in it.
PACKAGES=curl,netcat-openbsd,iproute2,socat,dnsutils,nginx-light,util-linux,ca-certificates,procps
BASE=$CACHE/e2e-debian-bookworm-$(echo "$PACKAGES" | sha256sum | cut -c1-12).tar
if [ ! -s "$BASE" ]; then
	command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
	log "debootstrapping the images' Debian layer (a few minutes; cached in $BASE)"
	mmdebstrap --quiet --variant=minbase --mode=root --format=tar --skip=output/dev --include="$PACKAGES" \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--aptopt='Acquire::Languages "none"' \
		--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
		bookworm "$BASE.new" http://deb.debian.org/debian >&2
	mv "$BASE.new" "$BASE"
fi

# The images, rebuilt when an input changed.
IMAGES=$BIN/images.tar
for input in "$BASE" "$BIN/agnhost" "$BIN/nnp" "$BUSYBOX" "$ROOT"/hack/mkimage/*.go "$ROOT/_output/pause"; do
	[ -e "$input" ] || { echo "hack/nodeconformance/build.sh: $input missing (run hack/setup.sh first)" >&2; exit 1; }
	if [ ! -s "$IMAGES" ] || [ "$input" -nt "$IMAGES" ]; then
		log "building the suite's images"
		(cd "$ROOT" && go run ./hack/mkimage -pause "$ROOT/_output/pause" -busybox "$BUSYBOX" \
			-e2e-out "$IMAGES.new" -debian-base "$BASE" -agnhost "$BIN/agnhost" -nnp "$BIN/nnp" \
			-porter-cert "$K8S/test/images/agnhost/porter/localhost.crt" -porter-key "$K8S/test/images/agnhost/porter/localhost.key")
		mv "$IMAGES.new" "$IMAGES"
		break
	fi
done
echo "$BIN"
