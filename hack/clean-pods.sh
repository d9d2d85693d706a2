#!/usr/bin/env bash
# Removes every pod from the node's containerd the way nodelet would: it
# runs nodelet on an empty manifest directory until no sandbox is left.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
go build -ldflags "-s -w" -o _output/nodelet ./cmd/nodelet
empty=$(mktemp -d)
source hack/lib.sh
# shellcheck disable=SC2046 # one word or none
./_output/nodelet --pod-manifest-path="$empty" --root-dir=/var/lib/nodelet --read-only-port=0 $(nodelet_host_flags) >_output/clean-pods.log 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rmdir "$empty"' EXIT
for _ in $(seq 120); do
	left=$(ctr -n k8s.io containers ls -q | wc -l)
	[ "$left" = 0 ] && { echo "clean-pods: no pods left"; exit 0; }
	sleep 0.5
done
echo "clean-pods: $left containers remain; see _output/clean-pods.log" >&2
exit 1
