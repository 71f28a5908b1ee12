#!/usr/bin/env bash
# Download the wheels a GPU host may lack (CPython 3.12, x86-64 Linux, CUDA 13) into
# wheels/ (git-ignored), for experiments/gpu_check.sh to install offline: the project's
# dependencies and dask-cuda with everything they need. gpu_check.sh installs only the
# ones the host's Python does not have already.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip download --quiet --dest wheels --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  "dask-cuda[cu13]" dask distributed pandas pyyaml scikit-learn tqdm pydantic pooch greenlet \
  cryptography threadpoolctl
ls wheels | wc -l
