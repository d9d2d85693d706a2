#!/usr/bin/env bash
# Prepares this Debian host to run nodelet: containerd + runc, the CNI bridge,
# and the local images (no registry is reachable). Idempotent: run it as often
# as you like; it only changes what is missing or different.
#
# Usage: sudo hack/setup.sh [--cluster]
#   --cluster also installs etcd and builds the upstream control plane,
#   kubectl, kubeadm, the kubelet, containerd 2.x and metrics-server
#   (about 20 minutes cold on 2 cores, cached after): cluster mode and the
#   tests need them, the standalone demo does not.
set -euo pipefail
CLUSTER=0
for arg in "$@"; do
	case $arg in
	--cluster) CLUSTER=1 ;;
	*) echo "setup: unknown argument $arg (want --cluster)" >&2; exit 1 ;;
	esac
done
START=$SECONDS

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/_output"
CONTAINERD_SOCK=/run/containerd/containerd.sock
CNI_BIN_DIR=/usr/lib/cni
SANDBOX_IMAGE=registry.k8s.io/pause:3.10
MARKER="# written by nodelet hack/setup.sh"

log() { echo "setup [$((SECONDS - START))s]: $*"; }

[ "$(id -u)" = 0 ] || { echo "setup: must run as root" >&2; exit 1; }

# 1. Packages.
PKGS=(containerd runc containernetworking-plugins busybox-static bash-static iptables iproute2 gcc libc6-dev libseccomp-dev pkg-config)
[ $CLUSTER = 0 ] || PKGS+=(etcd-server)
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]} (apt)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. Kernel settings pods need for bridged networking. Not every VM allows all
# of them; the bridge works without br_netfilter.
modprobe overlay 2>/dev/null || true
modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.ipv4.ip_forward=1 || true
# The kernel settings the kubelet relies on, as a hardened node sets them
# for protectKernelDefaults (nodelet otherwise sets them at each start).
cat >/etc/sysctl.d/90-kubelet.conf <<'SYSCTL'
vm.overcommit_memory = 1
vm.panic_on_oom = 0
kernel.panic = 10
kernel.panic_on_oops = 1
kernel.keys.root_maxkeys = 1000000
kernel.keys.root_maxbytes = 25000000
SYSCTL
sysctl -q -p /etc/sysctl.d/90-kubelet.conf || true

# 3. containerd and CNI configuration, from the templates the test bed uses too.
fill() { # template, then @KEY@=value pairs
	local text
	text=$(cat "$1"); shift
	for kv in "$@"; do text=${text//"${kv%%=*}"/"${kv#*=}"}; done
	printf '%s\n%s\n' "$MARKER" "$text"
}
install_file() { # path, content; returns 0 when the file changed
	local path=$1 content=$2
	if [ -f "$path" ] && [ "$(cat "$path")" = "$content" ]; then return 1; fi
	mkdir -p "$(dirname "$path")"
	if [ -f "$path" ] && ! grep -qF "$MARKER" "$path"; then
		cp "$path" "$path.orig-nodelet"
		log "saved the previous $path as $path.orig-nodelet"
	fi
	printf '%s\n' "$content" >"$path"
	log "wrote $path"
}
changed=0
install_file /etc/containerd/config.toml "$(fill "$ROOT/hack/containerd/config.toml.tmpl" \
	@ROOT@=/var/lib/containerd @STATE@=/run/containerd @ADDRESS@=$CONTAINERD_SOCK \
	@CNI_CONF_DIR@=/etc/cni/net.d @CNI_BIN_DIR@=$CNI_BIN_DIR @SANDBOX_IMAGE@=$SANDBOX_IMAGE \
	@REGISTRY_CONFIG_DIR@=/etc/containerd/certs.d @SYSTEMD_CGROUP@=false)" && changed=1
mkdir -p /etc/containerd/certs.d
# The CNI file is JSON: the marker cannot be a comment, so it is not added.
cni=$(fill "$ROOT/hack/containerd/cni.conflist.tmpl" @NETWORK@=nodelet @BRIDGE@=nodelet0 @SUBNET@=10.88.0.0/16 | tail -n +2)
install_file /etc/cni/net.d/10-nodelet.conflist "$cni" && changed=1
for f in /etc/cni/net.d/*; do
	[ "$f" = /etc/cni/net.d/10-nodelet.conflist ] || { mv "$f" "$f.disabled-by-nodelet" && log "disabled $f"; }
done 2>/dev/null || true

# 4. containerd running (there is no systemd on these machines).
running() { ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1; }
if running && [ $changed = 1 ]; then
	log "restarting containerd for the new configuration"
	# Only the node's own: the tests run private containerds beside it.
	pkill -f "^containerd --config /etc/containerd/config.toml" || true
	for _ in $(seq 50); do running || break; sleep 0.1; done
fi
if ! running; then
	log "starting containerd (log: /var/log/containerd.log)"
	setsid nohup containerd --config /etc/containerd/config.toml >>/var/log/containerd.log 2>&1 </dev/null &
	for _ in $(seq 100); do running && break; sleep 0.1; done
	running || { echo "setup: containerd did not start; see /var/log/containerd.log" >&2; exit 1; }
fi

# 5. Local images: a static pause and busybox, imported into the CRI namespace.
log "building the local images"
mkdir -p "$OUT"
for prog in pause euid; do
	if [ ! -x "$OUT/$prog" ] || [ "$ROOT/hack/images/$prog.c" -nt "$OUT/$prog" ]; then
		gcc -static -O2 -o "$OUT/$prog" "$ROOT/hack/images/$prog.c"
	fi
done
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$OUT/grpchealth" ./hack/images/grpchealth)
(cd "$ROOT" && go run ./hack/mkimage -out "$OUT/images.tar.new" -pause "$OUT/pause" -busybox /bin/busybox -grpchealth "$OUT/grpchealth" -euid "$OUT/euid")
mv "$OUT/images.tar.new" "$OUT/images.tar"
ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$OUT/images.tar" >/dev/null
log "images: $(ctr --address "$CONTAINERD_SOCK" -n k8s.io images ls -q | grep -E 'pause|busybox|grpchealth' | tr '\n' ' ')"
# 6. With --cluster: the upstream control plane and kubectl for cluster
# mode, built from the pinned k8s.io/kubernetes module (minutes when cold,
# cached afterwards).
if [ $CLUSTER = 0 ]; then
	log "done (standalone; hack/setup.sh --cluster adds the control plane)"
	exit 0
fi
log "building the upstream control plane (about 20 minutes the first time; cached after)"
K8S_BIN=$(bash "$ROOT/hack/cluster/build.sh")
log "building containerd 2.x for the second runtime the tests use (a few minutes the first time; cached after)"
log "containerd 2.x in $(bash "$ROOT/hack/containerd/build.sh")"
log "building metrics-server for the kubectl top test (a few minutes the first time; cached after)"
log "metrics-server: $(bash "$ROOT/hack/metrics-server/build.sh")"
ln -sf "$K8S_BIN/kubectl" /usr/local/bin/kubectl
log "control plane binaries in $K8S_BIN"
log "done"
