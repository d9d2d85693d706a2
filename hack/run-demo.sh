#!/usr/bin/env bash
# Sets the machine up if needed, builds nodelet and runs it standalone on
# the static pods in examples/. Ctrl-C stops nodelet; the pods keep running
# (as with the kubelet). Remove a manifest while nodelet runs to delete
# its pod.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash hack/setup.sh
go build -ldflags "-s -w" -o _output/nodelet ./cmd/nodelet
go build -o _output/podtable ./hack/podtable

MANIFESTS=${MANIFESTS:-$ROOT/examples}
source hack/lib.sh
# shellcheck disable=SC2207 # one word or none
EXTRA=($(nodelet_host_flags))
[ ${#EXTRA[@]} = 0 ] || echo "run-demo: this host uses cgroup v1; running nodelet with ${EXTRA[*]}"
PORT=${PORT:-10255}
echo "run-demo: starting nodelet on the manifests in $MANIFESTS (log: _output/nodelet.log)"
./_output/nodelet --pod-manifest-path="$MANIFESTS" --root-dir=/var/lib/nodelet --read-only-port="$PORT" -v=2 "${EXTRA[@]}" \
	>_output/nodelet.log 2>&1 &
pid=$!
# Ctrl-C reaches nodelet too; either way, once it has stopped cleanly the
# demo ends cleanly (make would report an error otherwise).
stop() {
	kill -TERM $pid 2>/dev/null || true
	status=0
	wait $pid || status=$?
	echo "run-demo: nodelet stopped (status $status); the pods keep running"
	exit $status
}
trap stop INT TERM
./_output/podtable -url "http://127.0.0.1:$PORT/pods" -wait 60s || true
cat <<MSG

run-demo: nodelet is running. See its pods with
    curl -s http://127.0.0.1:$PORT/pods        (the full PodList as JSON)
    _output/podtable -url http://127.0.0.1:$PORT/pods
and its health with
    curl -s http://127.0.0.1:$PORT/healthz
Edit or remove files in $MANIFESTS to change or delete pods. Ctrl-C stops nodelet.
MSG
wait $pid
