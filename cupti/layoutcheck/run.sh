#!/bin/sh
# Checks libspecprof_cupti.so's and the mock CUPTI's record layouts against NVIDIA's headers.
#
#   cupti/layoutcheck/run.sh [CUDA_INCLUDE_DIR [LIBCUPTI]]
#       on a CUDA host; defaults: /usr/local/cuda-13.0/targets/x86_64-linux/include and
#       /usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13 (its cuptiGetVersion must be
#       in the supported ranges)
#   cupti/layoutcheck/run.sh --debian
#       on a CPU machine with Debian's libcupti-dev (CUPTI 11.8 headers, no cuda.h: a stub
#       supplies the handle types)
# Compiling is the check: a mismatch is a _Static_assert failure naming the field.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-gcc}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ "${1:-}" = "--debian" ]; then
    inc=/usr/include
    extra="-DLAYOUTCHECK_PARTIAL -I$here/stubcuda"
    lib=""
else
    inc=${1:-/usr/local/cuda-13.0/targets/x86_64-linux/include}
    extra=""
    lib=${2:-/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13}
fi
if [ ! -f "$inc/cupti_activity.h" ]; then
    echo "run.sh: no cupti_activity.h in $inc" >&2
    exit 2
fi
# shellcheck disable=SC2086
"$cc" -std=gnu11 -Wall -Wno-unused-function $extra -I"$inc" -I"$here/../lib" \
    -I"$here/../../testdata/mockcupti" -o "$out/layout_check" "$here/layout_check.c" -ldl
if [ -n "$lib" ]; then
    "$out/layout_check" "$lib"
else
    "$out/layout_check"
fi
