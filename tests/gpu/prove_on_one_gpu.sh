#!/usr/bin/env bash
# The one-box GPU proof: mpicluster's GPU path (CUDA-aware Open MPI with UCX and UCC,
# NCCL, nccl-tests, mpi4py, the GPU smoke test's programs, the GPU facts) built and run
# on one machine with one NVIDIA GPU, without network. tests/gpu/onebox.py says what it
# does, step by step.
#
#   python tests/gpu/carry.py             # here, with network: fills .onebox/ (~59 MiB)
#   tests/gpu/prove_on_one_gpu.sh OUT     # there, from the repository's root
#
# The box needs the NVIDIA driver, CUDA's toolkit (nvcc, at /usr/local/cuda or
# CUDA_HOME), gcc, make and Python 3.12 with PyTorch; .onebox/ brings the rest. OUT gets
# summary.json, onebox.log, logs.tar.gz and captures.tar.gz (real nvidia-smi output,
# kept as test data). ONEBOX_BUDGET and ONEBOX_TOTAL (seconds) change the build's and the
# whole proof's time (onebox.py --budget, --total). Exit 0: all worked; 1: a step failed
# (summary.json says which); 2: bad arguments; 3: no GPU here (one line, nothing done).
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-}
carry=${ONEBOX_CARRY:-$repo/.onebox}
if [ -z "$out" ] || [ $# -gt 1 ]; then
    echo "usage: tests/gpu/prove_on_one_gpu.sh OUT_FOLDER" >&2
    exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "prove_on_one_gpu: no NVIDIA GPU here (nvidia-smi lists none): the one-box GPU proof needs one" >&2
    exit 3
fi
if [ ! -d "$carry/cache" ] || [ ! -f "$carry/site.tar.xz" ]; then
    echo "prove_on_one_gpu: $carry lacks cache/ or site.tar.xz: run python tests/gpu/carry.py where PyPI is reachable" >&2
    exit 2
fi
python=${ONEBOX_PYTHON:-python3}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$cuda_home/bin/nvcc" ] && command -v nvcc >/dev/null 2>&1; then
    cuda_home=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
fi
unpacked=${TMPDIR:-/tmp}/onebox-site
mkdir -p "$out"
# the driver's needs, beside (not into) the box's Python: carry.py's unpacked wheels
rm -rf "$unpacked"
"$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    "$carry/site.tar.xz" "$unpacked" >"$out/site.log" 2>&1 || {
    echo "prove_on_one_gpu: unpacking $carry/site.tar.xz failed: see $out/site.log" >&2
    exit 1
}
export PYTHONPATH=$unpacked/site PYTHONUNBUFFERED=1
exec "$python" "$here/onebox.py" --out "$out" --carry "$carry" \
    --cuda-home "$cuda_home" --budget "${ONEBOX_BUDGET:-410}" --total "${ONEBOX_TOTAL:-470}"
