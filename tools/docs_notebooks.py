"""Execute the notebooks the docs site renders (`make docs`) into build/docs/notebooks/, where
tools/mkdocs_hooks.py finds them.

    python tools/docs_notebooks.py

The quickstart runs at its smoke setting (`spt.studies.quickstart.SMOKE`, one seed: a pipeline
check whose numbers mean nothing; `make demo` runs the real one), the walkthrough at its defaults
(the teaching run itself). The executed copies and the quickstart's results stay in that folder,
which git ignores; committed notebooks keep no outputs."""
import dataclasses
import sys
import time

import papermill
from mkdocs_hooks import EXECUTED, NOTEBOOKS, ROOT

from spt.studies.quickstart import SMOKE

OUT = EXECUTED.relative_to(ROOT)  # relative: the rendered parameters name no home folder


def parameters() -> dict:
    """Papermill parameters of each rendered notebook, by notebook name."""
    smoke = {k: list(v) if isinstance(v, tuple) else v  # papermill writes a tuple as a string
             for k, v in dataclasses.asdict(SMOKE).items() if k != "progress"}
    # None ("validate on all") is no int to the notebook's parameter check: all is val_size
    smoke["pretrain_val"] = smoke["pretrain_val"] or smoke["val_size"]
    return {"00_quickstart": {**smoke, "seeds": [0], "out_dir": str(OUT)},
            "10_walkthrough": {"runs_dir": str(OUT / "10_walkthrough_runs")}}


def main() -> int:
    EXECUTED.mkdir(parents=True, exist_ok=True)
    params = parameters()
    for name in NOTEBOOKS:
        start = time.perf_counter()
        papermill.execute_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"), str(EXECUTED / f"{name}.ipynb"),
                                   parameters=params[name], kernel_name="python3", cwd=str(ROOT),
                                   progress_bar=False)
        print(f"executed notebooks/{name}.ipynb into {OUT} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
