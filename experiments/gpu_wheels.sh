#!/usr/bin/env bash
# Download the wheels the GPU host lacks (CPython 3.12, x86-64 Linux, CUDA 13) into
# wheels/ (git-ignored), for experiments/gpu_check.sh to install offline.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip download --quiet --dest wheels --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
  "dask-cuda[cu13]" dask distributed pydantic pyyaml tqdm threadpoolctl cryptography
ls wheels | wc -l
