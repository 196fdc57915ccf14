"""Write each study notebook's parameters cell from spt.studies.commands.run_parameters (its one source).

    python tools/write_parameter_cells.py           # rewrite the cells that differ
    python tools/write_parameter_cells.py --check   # exit 1 naming the notebooks that differ

Only the source of the cell tagged "parameters" changes; the other cells, ids and metadata stay.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spt.studies.commands.run_parameters import parameters_cell
from spt.studies.registry import STUDIES

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a difference")
    args = parser.parse_args(argv)
    differ = []
    for name, study in STUDIES.items():
        path = NOTEBOOKS / f"{name}.ipynb"
        nb = json.loads(path.read_text(encoding="utf-8"))
        cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
        want = parameters_cell(study)
        if "".join(cell["source"]) == want:
            continue
        differ.append(path.name)
        if not args.check:
            cell["source"] = want.splitlines(keepends=True)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(("differ: " if args.check else "rewrote: ") + (", ".join(differ) or "none"))
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
