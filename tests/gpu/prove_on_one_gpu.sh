#!/usr/bin/env bash
# The one-box GPU proof: mpicluster's GPU path (CUDA-aware Open MPI, NCCL, nccl-tests,
# mpi4py, the GPU smoke test's programs, the GPU facts) built and run on one machine with
# one NVIDIA GPU, without network. tests/gpu/onebox.py says what it does, step by step.
#
#   python tests/gpu/carry.py             # here, with network: fills .onebox/ (~45 MiB)
#   tests/gpu/prove_on_one_gpu.sh OUT     # there, from the repository's root
#
# The box needs the NVIDIA driver, CUDA's toolkit (nvcc, at /usr/local/cuda or
# CUDA_HOME), gcc, make and Python 3.12 with PyTorch; .onebox/ brings the rest. OUT gets
# summary.json, onebox.log, logs.tar.gz and captures.tar.gz (real nvidia-smi output,
# kept as test data). Exit 0: all worked; 1: a step failed (summary.json says which);
# 2: bad arguments; 3: no GPU here (one line, nothing done).
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
if [ ! -d "$carry/cache" ] || [ ! -d "$carry/site-wheels" ]; then
    echo "prove_on_one_gpu: $carry lacks cache/ or site-wheels/: run python tests/gpu/carry.py where PyPI is reachable" >&2
    exit 2
fi
python=${ONEBOX_PYTHON:-python3}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$cuda_home/bin/nvcc" ] && command -v nvcc >/dev/null 2>&1; then
    cuda_home=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
fi
site=${TMPDIR:-/tmp}/onebox-site
mkdir -p "$out"
# the driver's needs, beside (not into) the box's Python
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$carry"/site-wheels/*.whl >"$out/pip.log" 2>&1 || {
    echo "prove_on_one_gpu: installing $carry/site-wheels failed: see $out/pip.log" >&2
    exit 1
}
export PYTHONPATH=$site PATH=$site/bin:$PATH PYTHONUNBUFFERED=1
exec "$python" "$here/onebox.py" --out "$out" --carry "$carry" \
    --cuda-home "$cuda_home"
