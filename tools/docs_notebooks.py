"""Execute the notebooks the docs site renders (`make docs`), into build/docs/notebooks/.

    python tools/docs_notebooks.py [OUT]

The quickstart runs at its smoke setting (`spt.studies.quickstart.SMOKE`, one seed: a pipeline
check whose numbers mean nothing; `make demo` runs the real one), the walkthrough at its defaults
(the teaching run itself, about two minutes on a CPU). The executed copies and the quickstart's
results stay in OUT, which git ignores; committed notebooks keep no outputs."""
import dataclasses
import sys
import time
from pathlib import Path

import papermill

from spt.studies.quickstart import SMOKE

ROOT = Path(__file__).resolve().parents[1]


def parameters(out: Path) -> dict:
    """Papermill parameters of each rendered notebook, by notebook name."""
    smoke = {k: list(v) if isinstance(v, tuple) else v  # papermill writes a tuple as a string
             for k, v in dataclasses.asdict(SMOKE).items() if k != "progress"}
    # None ("validate on all") is no int to the notebook's parameter check: all is val_size
    smoke["pretrain_val"] = smoke["pretrain_val"] or smoke["val_size"]
    return {
        "00_quickstart": {**smoke, "seeds": [0], "out_dir": str(out)},
        "10_walkthrough": {"runs_dir": str(out / "10_walkthrough_runs")},
    }


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else ROOT / "build" / "docs" / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    for name, params in parameters(out).items():
        start = time.perf_counter()
        papermill.execute_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"), str(out / f"{name}.ipynb"),
                                   parameters=params, kernel_name="python3", cwd=str(ROOT),
                                   progress_bar=False)
        print(f"executed notebooks/{name}.ipynb -> {out / name}.ipynb in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
