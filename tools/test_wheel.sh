#!/usr/bin/env bash
# The install a researcher makes on a GPU node, tried end to end: build spt's wheel, install it into
# a fresh virtual environment outside the checkout, then from another folder print the version,
# list the studies and run one smoke study.   Usage: tools/test_wheel.sh PYTHON
#   PYTHON: an interpreter with `build` installed (the checkout's .venv/bin/python after make install)
# Everything happens in a temporary folder, removed at the end (KEEP=1 keeps it).
set -euo pipefail
PY="${1:?usage: test_wheel.sh PYTHON}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/spt-test-wheel.XXXXXX")"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
step() { echo "[test-wheel] $*"; }
# run a command with its output in a log, shown only when it fails
quiet() { "$@" >"$tmp/step.log" 2>&1 || { cat "$tmp/step.log"; step "failed: $*"; exit 1; }; }
t0=$SECONDS

step "building the wheel into $tmp/dist"
quiet "$PY" -m build --wheel --outdir "$tmp/dist" "$repo"
wheel="$(ls "$tmp"/dist/spt-*.whl)"
unzip -l "$wheel" spt/notebooks/04_data_scales.ipynb >/dev/null || { step "the wheel has no notebooks"; exit 1; }

step "installing $(basename "$wheel") into a fresh venv (torch: tools/install_torch.sh)"
"${BASE_PYTHON:-python3}" -m venv "$tmp/venv"
vpy="$tmp/venv/bin/python"
quiet "$vpy" -m pip install --upgrade pip
quiet "$repo/tools/install_torch.sh" "$vpy"
quiet "$vpy" -m pip install "$wheel"
t1=$SECONDS

mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
# nothing from the checkout may leak in: no PYTHONPATH, no notebooks folder, no checkout above
unset PYTHONPATH SPT_NOTEBOOKS
spt="$tmp/venv/bin/spt"
step "$("$spt" --version)"
"$spt" study list
step "spt study run 04_data_scales --preset smoke --out out"
t2=$SECONDS
"$spt" study run 04_data_scales --preset smoke --out out --quiet
t3=$SECONDS
# the notebook ran with the installed notebooks folder as its working directory: it wrote nothing there
installed="$("$vpy" -c 'from spt.studies.commands.notebooks import packaged_notebooks; print(packaged_notebooks())')"
[ "$(ls -A "$installed" | grep -vc '\.ipynb$')" = 0 ] || { step "a run wrote into $installed"; ls -A "$installed"; exit 1; }
"$vpy" - <<'PY'
from spt.results import provenance
from spt.studies.machinery.cells import load_study
ds = load_study("out", "04_data_scales")
table = provenance(ds)
print(table.drop(columns=["platform", "python", "host"]).to_string(index=False))
assert table["spt"].notna().all(), "a result file without provenance"
PY
"$spt" notebooks copy mine >/dev/null && ls mine/04_data_scales.ipynb >/dev/null
step "ok: build + install $((t1 - t0)) s, the smoke study $((t3 - t2)) s, all $((SECONDS - t0)) s"
