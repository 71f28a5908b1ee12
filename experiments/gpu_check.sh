#!/usr/bin/env bash
# GPU check: CuPy workers, a dask-cuda cluster, NCCL, cgdp with GPU workers.
#
# The GPU host we test on ships CuPy (CUDA 13), NumPy, pandas and scikit-learn but not
# dask, distributed or dask-cuda, and reaches no package index. So:
#   1. where an index is reachable:  bash experiments/gpu_wheels.sh      (fills wheels/)
#   2. on the GPU host:              bash experiments/gpu_check.sh [wheels]
# It prints one table (each check, its throughput as a ratio of a plain CuPy loop, its
# largest difference from the CPU reference trajectory) and exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-wheels}
VENV=${WB_GPU_VENV:-/tmp/workbench-gpu}
python3 -m venv --system-site-packages "$VENV"
if [ -d "$WHEELS" ]; then
  "$VENV/bin/pip" install --quiet --no-index --find-links "$WHEELS" \
    dask distributed dask-cuda pydantic pyyaml tqdm threadpoolctl cryptography
fi
"$VENV/bin/python" -c "import cupy, dask_cuda; print('cupy', cupy.__version__, '| dask-cuda', dask_cuda.__version__, '| GPUs', cupy.cuda.runtime.getDeviceCount())"
PYTHONPATH=$PWD "$VENV/bin/python" -m workbench.apps.gpucheck
