#!/bin/bash
# What UCX's CUDA support compiles and links against, gathered in OUT (the component's
# build folder; nothing here is installed):
#   OUT/include/nvml.h   only when the toolkit has none (installed without cuda-nvml-dev):
#                        taken from the nvidia-nvml-dev wheel in WHEELS
#   OUT/lib/libcuda.so, OUT/lib/libnvidia-ml.so
#                        links to the first such library (or its .so.1) in the
#                        candidate folders (the toolkit's stubs, then the driver's), else,
#                        when STUB is 1 (nodes without GPUs), link-time stubs exporting
#                        every cu* / nvml* name that cuda.h / nvml.h declare
# Prints the folder with nvml.h (configure gets -I<it> -L<OUT/lib>).
# Exit 3 with the reason on stderr when something cannot be found.
#
# usage: cuda_link.sh OUT CUDA_HOME STUB WHEELS CANDIDATE_DIR...
set -euo pipefail
out=$1 home=$2 stub=$3 wheels=$4
shift 4
mkdir -p "$out/include" "$out/lib"

include=
for dir in "$home/include" "$home"/targets/*/include; do
    if [ -e "$dir/nvml.h" ]; then include=$dir; break; fi
done
if [ -z "$include" ]; then
    wheel=$(find "$wheels" -maxdepth 1 -name 'nvidia_nvml_dev*.whl' 2>/dev/null | sort | tail -n 1 || true)
    if [ -z "$wheel" ]; then
        echo "no nvml.h in $home/include and no nvidia-nvml-dev wheel in $wheels" >&2
        exit 3
    fi
    python3 - "$wheel" "$out/include/nvml.h" <<'PY'
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith("/include/nvml.h"))
    with open(sys.argv[2], "wb") as header:
        header.write(wheel.read(name))
PY
    include=$out/include
fi

# name:header:prefix of the names the stub exports
for lib in cuda:$home/include/cuda.h:cu nvidia-ml:$include/nvml.h:nvml; do
    IFS=: read -r name header prefix <<<"$lib"
    found=
    for dir in "$@"; do
        for file in "$dir/lib$name.so" "$dir/lib$name.so.1"; do
            if [ -e "$file" ]; then found=$file; break 2; fi
        done
    done
    if [ -n "$found" ]; then
        ln -sfn "$found" "$out/lib/lib$name.so"
    elif [ "$stub" = 1 ]; then
        { gcc -E -P -I"$home/include" -I"$include" "$header"; cat "$header"; } \
            | grep -oE "\\b${prefix}[A-Z][A-Za-z0-9_]*[[:space:]]*\\(" | tr -d '( \t' | sort -u \
            | sed 's/.*/void &(void) {}/' >"$out/lib/lib$name.c"
        gcc -shared -fPIC -Wl,-soname,"lib$name.so.1" -o "$out/lib/lib$name.so" \
            "$out/lib/lib$name.c"
    else
        echo "no lib$name.so in $*" >&2
        exit 3
    fi
done
echo "$include"
