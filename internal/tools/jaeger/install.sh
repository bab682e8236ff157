#!/bin/sh
# Builds Jaeger (github.com/jaegertracing/jaeger/cmd/jaeger, the v2 all-in-one binary), at the
# version pinned in this directory's go.mod, from the Go module proxy, for the OTLP end-to-end
# test (cmd/specprof, TestJaeger*). The binary is cached as $SPECPROF_CACHE/jaeger-<version>
# (default /var/cache/specprof, or ~/.cache/specprof when that is not writable), so a rerun on the
# same machine costs nothing; a fresh 2-core machine needs about 4 minutes. Prints the path.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
GO=${GO:-go}
version=$(cd "$here" && "$GO" list -m -f '{{.Version}}' github.com/jaegertracing/jaeger)
cache=${SPECPROF_CACHE:-/var/cache/specprof}
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
	cache=${HOME:-/tmp}/.cache/specprof
	mkdir -p "$cache"
fi
bin="$cache/jaeger-$version"
if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi
echo "building jaeger $version into $bin (a few minutes)" >&2
start=$(date +%s)
(cd "$here" && "$GO" build -buildvcs=false -trimpath -o "$bin.tmp.$$" \
	-ldflags "-X github.com/jaegertracing/jaeger/internal/version.latestVersion=$version" \
	github.com/jaegertracing/jaeger/cmd/jaeger)
mv "$bin.tmp.$$" "$bin"
echo "built jaeger $version in $(( $(date +%s) - start )) s" >&2
echo "$bin"
