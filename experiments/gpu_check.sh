#!/usr/bin/env bash
# GPU check: CuPy workers, a dask-cuda cluster, NCCL, cgdp with GPU workers, and every
# algorithm on GPU workers against the same run on CPU workers.
#
# GPU hosts often ship CuPy (and NumPy, pandas) inside their own Python environment and
# reach no package index. So:
#   1. where an index is reachable:  bash experiments/gpu_wheels.sh      (fills wheels/; copy it over)
#   2. on the GPU host:              bash experiments/gpu_check.sh [wheels]
# On a GPU host that reaches an index, step 2 alone does both (it calls gpu_wheels.sh for the
# host's Python and CUDA when the wheel folder is missing).
# Step 2 uses the Python that has CuPy (PYTHON, default python3), reads its CUDA version,
# lets pip resolve the project's dependencies and that CUDA's GPU extra (dask-cuda[cuN],
# nvidia-nccl-cuN) against the wheel folder and that Python's own packages, installs only
# what is missing (into WB_GPU_SITE, put first on PYTHONPATH; the host's own packages, CuPy
# and NumPy among them, are left as they are), then prints two tables and exits non-zero
# on failure.
#   bash experiments/gpu_check.sh --dry-run [--cuda 13] [wheels]   # say what it would install, run nothing
# First run: an H200 with CuPy 14.2 in a virtualenv, 2026-12-04 (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${WB_GPU_SITE:-/tmp/workbench-gpu-site}
DRY=0
CUDA=""
WHEELS=wheels
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1; shift ;;
    --cuda) CUDA=$2; shift 2 ;;
    *) WHEELS=$1; shift ;;
  esac
done
if [ -z "$CUDA" ]; then
  CUDA=$("$PY" -c "import cupy; print(cupy.cuda.runtime.runtimeGetVersion() // 1000)" 2>/dev/null) || {
    echo "gpu_check: $PY has no working CuPy; $("$PY" -c 'from workbench.maths.backend import gpu_install_hint; print(gpu_install_hint())' 2>/dev/null || echo 'install cupy-cuda12x or cupy-cuda13x for your driver') (or set PYTHON)"
    exit 2; }
fi
if [ ! -d "$WHEELS" ] && [ "$DRY" = 0 ]; then
  hostpy=$("$PY" -c "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')")
  echo "gpu_check: no wheel folder $WHEELS; fetching the wheels for Python $hostpy and CUDA $CUDA (needs a package index)"
  PYTHON="$PY" WHEELS="$WHEELS" bash experiments/gpu_wheels.sh --python "$hostpy" --cuda "$CUDA" || {
    echo "gpu_check: could not fetch wheels here: run experiments/gpu_wheels.sh --python $hostpy --cuda $CUDA where an index is reachable and copy $WHEELS/ over"; exit 2; }
fi
if [ -d "$WHEELS" ] || [ "$DRY" = 1 ]; then
  # What to resolve: the project's dependencies (pyproject.toml) and the GPU extra of this CUDA.
  read -r -a wanted < <("$PY" - "$CUDA" <<'PYEOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extra = {"12": "gpu", "13": "gpu-cu13"}.get(sys.argv[1])
if extra is None:
    sys.exit(f"gpu_check: CUDA {sys.argv[1]}: the gpu extras are for CUDA 12 and 13")
print(" ".join(r.replace(" ", "") for r in project["dependencies"] + project["optional-dependencies"][extra]))
PYEOF
)
  # pip resolves them against the wheel folder and the host's own packages, and reports what is
  # missing (exact versions, this CUDA's builds only); those alone go into $SITE, without deps
  resolve=("$PY" -m pip install --dry-run --quiet --no-index --find-links "$WHEELS" --report - "${wanted[@]}")
  if [ "$DRY" = 1 ]; then
    echo "dry run (CUDA $CUDA): ${resolve[*]}"
    echo "dry run: then $PY -m pip install --no-index --no-deps --find-links $WHEELS --target $SITE <each missing name==version>"
    exit 0
  fi
  missing=$("${resolve[@]}" | "$PY" -c "import json, sys; print(' '.join(f\"{p['metadata']['name']}=={p['metadata']['version']}\" for p in json.load(sys.stdin)['install']))")
  if [ -n "$missing" ]; then
    echo "installing into $SITE for CUDA $CUDA: $missing"
    # shellcheck disable=SC2086
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --upgrade --find-links "$WHEELS" --target "$SITE" $missing
  fi
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import cupy, dask_cuda; print('cupy', cupy.__version__, '| dask-cuda', dask_cuda.__version__, '| GPUs', cupy.cuda.runtime.getDeviceCount())"
"$PY" -m workbench.bench.gpucheck
