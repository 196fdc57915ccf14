#!/usr/bin/env bash
# Install PyTorch into the given Python environment without pulling a multi-GB CUDA build on a
# machine that has no NVIDIA GPU.  Usage: tools/install_torch.sh PYTHON [PIP OPTIONS...]
# (the options are given to every `pip install` it runs, e.g. --no-compile)
#   - torch already importable            -> nothing to do
#   - an NVIDIA GPU is present            -> `pip install torch` (the default CUDA build)
#   - no GPU, a local CPU wheel is known  -> `pip install torch==<that version>` (pip's find-links)
#   - no GPU otherwise                    -> the CPU-only build from PyTorch's CPU wheel index
# Override with TORCH_SPEC (e.g. TORCH_SPEC="torch==2.5.1") and TORCH_INDEX_URL.
set -euo pipefail
PY="${1:?usage: install_torch.sh PYTHON [PIP OPTIONS...]}"
shift
if "$PY" -c "import torch" 2>/dev/null; then
  echo "[install_torch] torch $("$PY" -c 'import torch; print(torch.__version__)') already installed"
  exit 0
fi
if [ -n "${TORCH_SPEC:-}" ]; then
  exec "$PY" -m pip install "$@" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "[install_torch] NVIDIA GPU found: installing the default (CUDA) torch build"
  exec "$PY" -m pip install "$@" torch
fi
# No GPU. Look for a CPU wheel in pip's configured find-links folders (some managed machines ship one).
links="$("$PY" -m pip config list 2>/dev/null | sed -n "s/.*find-links='\(.*\)'/\1/p" | tr ' ' '\n')"
for d in $links; do
  w="$(ls "$d"/torch-*+cpu-*.whl 2>/dev/null | sort -V | tail -1 || true)"
  if [ -n "$w" ]; then
    v="$(basename "$w" | cut -d- -f2 | cut -d+ -f1)"
    echo "[install_torch] no GPU: installing the local CPU build torch==$v ($w)"
    exec "$PY" -m pip install "$@" "torch==$v"
  fi
done
echo "[install_torch] no GPU: installing the CPU-only torch build"
exec "$PY" -m pip install "$@" torch --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
