#!/usr/bin/env bash
# GPU check: CuPy workers, a dask-cuda cluster, NCCL, cgdp with GPU workers, and every
# algorithm on GPU workers against the same run on CPU workers.
#
# GPU hosts often ship CuPy (and NumPy, pandas) inside their own Python environment and
# reach no package index. So:
#   1. where an index is reachable:  bash experiments/gpu_wheels.sh      (fills wheels/)
#   2. on the GPU host:              bash experiments/gpu_check.sh [wheels]
# Step 2 uses the Python that has CuPy (PYTHON, default python3), installs from the wheel
# folder only the distributions that Python lacks (into WB_GPU_SITE, put first on
# PYTHONPATH; the host's own packages, CuPy and NumPy among them, are left as they are),
# then prints two tables and exits non-zero on failure.
# First run: an H200 with CuPy 14.2 in a virtualenv, 2026-12-04 (README, "GPUs").
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-wheels}
PY=${PYTHON:-python3}
SITE=${WB_GPU_SITE:-/tmp/workbench-gpu-site}
"$PY" -c "import cupy" 2>/dev/null || { echo "gpu_check: $PY has no CuPy; install cupy-cuda12x or cupy-cuda13x for your driver (or set PYTHON)"; exit 2; }
if [ -d "$WHEELS" ]; then
  missing=$("$PY" - "$WHEELS" <<'PY'
import importlib.metadata as md, pathlib, re, sys
have = set()
for d in md.distributions():
    name = d.metadata["Name"]
    if name:
        have.add(re.sub(r"[-_.]+", "-", name).lower())
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    if name not in have:
        print(wheel)
PY
)
  if [ -n "$missing" ]; then
    echo "installing into $SITE: $(echo "$missing" | xargs -n1 basename | sed 's/-[0-9].*//' | tr '\n' ' ')"
    # shellcheck disable=SC2086
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --upgrade --target "$SITE" $missing
  fi
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import cupy, dask_cuda; print('cupy', cupy.__version__, '| dask-cuda', dask_cuda.__version__, '| GPUs', cupy.cuda.runtime.getDeviceCount())"
"$PY" -m workbench.apps.gpucheck
