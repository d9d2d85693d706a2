#!/usr/bin/env bash
# Runs the integration suites on both runtimes at once: every package but
# the fault and devices suites on the host's containerd (Debian's 1.6), and
# the standalone, runtime, systemd, fault, security and devices suites on
# containerd 2.x (hack/containerd/build.sh; the devices suite needs its
# CDI), which balances the two halves' time; then upstream's node
# conformance subset (test/nodeconformance). Lines
# are prefixed with the runtime; the exit status is the worse of the two.
# The tests that wait out certificate lifetimes are make test-long's.
set -uo pipefail
GO=${GO:-go}
# The timeout is each package's: the cluster suite took 26.5 of 30 minutes
# on a slower VM (1,587 s where it took 1,228), so it has room to spare.
FLAGS=(-race -count=1 -timeout 45m -tags integration)
(
	set -o pipefail
	$GO test "${FLAGS[@]}" $($GO list -tags integration ./... | grep -v -e /test/faults -e /test/integration/devices -e /test/nodeconformance) 2>&1 | sed -u 's/^/[containerd 1.6] /'
) &
one=$!
(
	set -o pipefail
	NODELET_TEST_CONTAINERD=2 $GO test "${FLAGS[@]}" ./test/integration/standalone/ ./test/integration/runtime/ ./test/integration/systemd/ ./test/faults/ ./test/security/ ./test/integration/devices/ 2>&1 |
		sed -u 's/^/[containerd 2.x] /'
) &
two=$!
# Upstream's node conformance suite is built from the start (about 15
# minutes the first time), overlapping the suites; its subset runs once
# the containerd 1.6 half is done: its agent takes the kubelet's ports
# (10250, 10248), as the kubeadm node of the cluster suite does.
bash hack/nodeconformance/build.sh >/dev/null 2> >(sed -u 's/^/[node conformance] /' >&2) &
build=$!
wait $one
r1=$?
wait $build
# No -race: the agent is nodelet's release build, as upstream's is.
$GO test -count=1 -timeout 45m -tags integration -v ./test/nodeconformance/ 2>&1 | sed -u 's/^/[node conformance] /'
r3=${PIPESTATUS[0]}
wait $two
r2=$?
echo "integration: containerd 1.6 (all packages but faults, devices and node conformance) exit $r1, containerd 2.x (standalone, runtime, systemd, faults, security, devices) exit $r2, node conformance subset exit $r3"
[ $r1 = 0 ] && [ $r2 = 0 ] && [ $r3 = 0 ]
