#!/usr/bin/env bash
# Builds metrics-server from the pinned tools module into a cache
# directory (a few minutes cold; instant when cached) and prints the
# binary's path.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VERSION=$(awk '($1=="require" && $2=="sigs.k8s.io/metrics-server") {print $3} ($1=="sigs.k8s.io/metrics-server") {print $2}' "$HERE/tools/go.mod")
BIN=${NODELET_CACHE:-/var/cache/nodelet}/metrics-server-$VERSION
mkdir -p "$BIN"
if [ ! -x "$BIN/metrics-server" ]; then
	echo "building metrics-server $VERSION (cached in $BIN)" >&2
	(cd "$HERE/tools" && CGO_ENABLED=0 go build -trimpath -o "$BIN/metrics-server.new" sigs.k8s.io/metrics-server/cmd/metrics-server)
	mv "$BIN/metrics-server.new" "$BIN/metrics-server"
fi
echo "$BIN/metrics-server"
