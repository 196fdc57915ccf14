"""Every cell of every study preset with the configuration that decides whether a stored result is
its own, and a comparison of two such lists under spt's same-run rule (:mod:`spt.same_run`).

A change that means to move no result (a refactor, a new execution setting) shows it by dumping the
cells before and after and comparing: a result file written by the old code is reused by the new
code exactly when the two configurations are the same run.

    git worktree add /tmp/old <commit>
    PYTHONPATH=/tmp/old python tools/cell_identities.py dump /tmp/old.jsonl   # the old code's cells
    python tools/cell_identities.py dump /tmp/new.jsonl                       # this checkout's
    python tools/cell_identities.py compare /tmp/old.jsonl /tmp/new.jsonl

`compare` prints how many cells keep their results, which moved (with the fields that differ),
and which cells exist on one side only; it exits 1 when any moved or disappeared. The rule it
applies is the comparing checkout's (the one that reads the files: an old configuration is read as
a stored result's is, :func:`spt.compat.cell_seeds_as_trained`, then compared under
:mod:`spt.same_run`). Nothing is trained or read:
paper presets name a data folder ("DATA") that need not exist.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter


def dump(path: str) -> int:
    """Write one JSON line per cell: study, preset, cell key and its stored configuration."""
    from spt.studies.machinery.study import preset_cells
    from spt.studies.registry import QUICKSTART, STUDIES

    n = 0
    with open(path, "w") as f:
        for study in (QUICKSTART, *STUDIES.values()):
            for preset in study.presets:
                p = study.preset(preset, data_root="DATA")
                for cell in preset_cells(p, seeds=p.seeds):
                    f.write(json.dumps({"study": study.name, "preset": preset, "key": cell.key,
                                        "config": cell.config}, sort_keys=True, default=str) + "\n")
                    n += 1
    print(f"{n} cells written to {path}")
    return 0


def _read(path: str) -> dict:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {(r["study"], r["preset"], r["key"]): r["config"] for r in rows}


def compare(old_path: str, new_path: str, show: int = 20) -> int:
    """Print which cells keep their results between two dumps; 1 when any moved or vanished."""
    from spt.compat import cell_seeds_as_trained
    from spt.same_run import differences

    old, new = _read(old_path), _read(new_path)
    moved = {k: differences(cell_seeds_as_trained(old[k]), new[k]) for k in old.keys() & new.keys()}
    moved = {k: d for k, d in moved.items() if d}
    gone, added = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
    kept = len(old.keys() & new.keys()) - len(moved)
    per_preset = Counter((s, p) for s, p, _ in old)
    print(f"{len(old)} cells before ({len(per_preset)} presets), {len(new)} after: {kept} keep "
          f"their results, {len(moved)} moved, {len(gone)} gone, {len(added)} new")
    for (s, p, key), diffs in sorted(moved.items())[:show]:
        fields = "; ".join(f"{f}: {a!r} -> {b!r}" for f, a, b in diffs[:4])
        print(f"  moved {s} [{p}] {key}: {fields}")
    for label, keys in (("gone", gone), ("new", added)):
        for s, p, key in keys[:show]:
            print(f"  {label} {s} [{p}] {key}")
    return 1 if moved or gone else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="write every preset's cells and configurations (JSON lines)")
    d.add_argument("out")
    c = sub.add_parser("compare", help="which cells of OLD keep their results under NEW")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--show", type=int, default=20, help="list at most this many of each kind")
    a = ap.parse_args(argv)
    return dump(a.out) if a.cmd == "dump" else compare(a.old, a.new, a.show)


if __name__ == "__main__":
    sys.exit(main())
