#!/usr/bin/env bash
# Download every wheel a GPU host may lack into wheels/ (git-ignored), for
# experiments/gpu_check.sh to install offline: the project's dependencies (read from
# pyproject.toml) and its GPU extra, dask-cuda with CuPy and NCCL, for CUDA 12 and 13
# (the `gpu` and `gpu-cu13` extras), for the project's Python floor and the GPU host's Python
# (x86-64 Linux). gpu_check.sh then installs only what the host's Python lacks, for its CUDA.
#
#   bash experiments/gpu_wheels.sh                     # Python floor + 3.12, CUDA 12 and 13
#   bash experiments/gpu_wheels.sh --python 3.13       # the GPU host's Python, if not 3.12
#   bash experiments/gpu_wheels.sh --cuda 13           # one CUDA only
#   bash experiments/gpu_wheels.sh --dry-run           # print the pip commands, download nothing
#
# Environment: PYTHON (the interpreter running pip, default python3), WHEELS (default wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-wheels}
HOST_PYTHON=3.12        # the GPU host this project is checked on (DESIGN: one H200, CUDA 13, Python 3.12)
CUDAS="12 13"
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python) HOST_PYTHON=$2; shift 2 ;;
    --cuda) CUDAS=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    *) echo "gpu_wheels: unknown option $1 (--python X.Y, --cuda 12|13, --dry-run)" >&2; exit 2 ;;
  esac
done
# The Python floor and the runtime dependencies, from pyproject.toml (one source).
read -r FLOOR DEPS < <("$PY" - <<'PYEOF'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
floor = re.search(r">=\s*(\d+\.\d+)", project["requires-python"]).group(1)
print(floor, " ".join(r.replace(" ", "") for r in project["dependencies"]))
PYEOF
)
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
for pyver in $(printf '%s\n' "$FLOOR" "$HOST_PYTHON" | sort -u); do
  for cuda in $CUDAS; do
    case "$cuda" in
      12) extra="dask-cuda[cu12] cupy-cuda12x nvidia-nccl-cu12" ;;
      13) extra="dask-cuda[cu13] cupy-cuda13x nvidia-nccl-cu13" ;;
      *) echo "gpu_wheels: --cuda takes 12 or 13, got $cuda" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    cmd=("$PY" -m pip download --quiet --dest "$WHEELS" --only-binary=:all: --python-version "$pyver"
         $PLATFORMS $extra $DEPS)
    echo "python $pyver, CUDA $cuda: ${cmd[*]}"
    if [ "$DRY" = 0 ]; then "${cmd[@]}"; fi
  done
done
if [ "$DRY" = 0 ]; then echo "$(ls "$WHEELS" | wc -l) wheels in $WHEELS"; fi
