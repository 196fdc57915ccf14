#!/usr/bin/env bash
# The wheels a GPU image without network lacks for `make gpu-report` (bench/gpu_report.py), saved
# into a folder to carry there: netCDF4 and cftime (spt's result files) and fla-core (the GLA /
# Gated DeltaNet kernels; pure Python, einops and triton from the image).
#   tools/gpu_wheels.sh [DIR] [PYTHON_VERSION]     # default .whl and 3.12
# On the GPU node, before the report:
#   python3 -m pip install --no-index --no-deps --target /tmp/site DIR/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
DIR="${1:-.whl}"
PYV="${2:-3.12}"
PY="${PYTHON:-python3}"
mkdir -p "$DIR"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYV" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$DIR" "netCDF4>=1.6" cftime "fla-core>=0.6"
ls -1 "$DIR"
