#!/usr/bin/env bash
# The subPath race (CVE-2021-25741), test/security's TestSubPathSwapRace
# (build tag long), on both runtimes at once: a container swaps its
# subPath directory for a link to / while another restarts 200 times
# mounting it (about 10 minutes). The exit status is the worse of the two.
set -uo pipefail
GO=${GO:-go}
FLAGS=(-v -race -count=1 -timeout 40m -tags integration,long -run TestSubPathSwapRace ./test/security/)
( set -o pipefail; $GO test "${FLAGS[@]}" 2>&1 | sed -u 's/^/[containerd 1.6] /' ) &
one=$!
NODELET_TEST_CONTAINERD=2 $GO test "${FLAGS[@]}" 2>&1 | sed -u 's/^/[containerd 2.x] /'
two=${PIPESTATUS[0]}
wait $one
one=$?
echo "subPath race: containerd 1.6 exit $one, containerd 2.x exit $two"
[ $one = 0 ] && [ $two = 0 ]
