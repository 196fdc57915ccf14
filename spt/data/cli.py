"""`spt data prepare | info | generate | fixtures`: the data commands, registered on argparse
subparsers.

    spt data prepare listops --root data            # download + unpack + verify
    spt data info pathx --root data --json          # one JSON object: splits, seq_len, ...
    spt data generate listops --root data --n-train 2000 --n-val 200 --n-test 200
    spt data generate pathfinder --resolution 128 --root data --n-images 5000
    spt data fixtures fixtures --tasks listops,pathx  # tiny official-format data, offline

Each handler takes the argparse Namespace and returns an exit code: 0 on success, 1 with a one-line
``error: ...`` on stderr for the errors a person can act on (missing / malformed data, a failed
download, an existing output folder). Also runnable as ``python -m spt.data.cli data ...``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import DataError
from .prepare import PrepareError
from .registry import TASK_NAMES

ACTIONABLE = (DataError, PrepareError, FileExistsError)


def _loader_options(args) -> dict:
    keys = ("target", "difficulty")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def _guard(fn):
    def run(args) -> int:
        try:
            return fn(args)
        except ACTIONABLE as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    run.__doc__ = fn.__doc__
    return run


@_guard
def cmd_prepare(args) -> int:
    """Download, unpack and verify a task under --root."""
    from .prepare import prepare_task

    log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    info = prepare_task(args.task, args.root, args.source, log=log, **_loader_options(args))
    if args.json:
        print(json.dumps(info))
    return 0


@_guard
def cmd_info(args) -> int:
    """Print a task's splits, sequence length, classes and vocabulary / channels."""
    from .registry import describe_task

    info = describe_task(args.task, args.root, **_loader_options(args))
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"{info['task']} ({info['root']}): {info['description']}")
    print("  splits: " + ", ".join(f"{k} {v}" for k, v in info["splits"].items()))
    kind = (f"vocab_size {info['vocab_size']}" if "vocab_size" in info
            else f"d_input {info['d_input']}")
    classes = info["num_classes"] if info["num_classes"] is not None else "regression"
    print(f"  seq_len {info['seq_len']}, classes {classes}, {kind}, "
          f"mask ratio {info['mask_ratio']}" + (", generated data" if info["generated"] else ""))
    for w in info["warnings"]:
        print(f"  warning: {w}")
    return 0


@_guard
def cmd_generate_listops(args) -> int:
    """Write generated ListOps TSVs in the release layout under --root."""
    import time

    from .listops import FOLDER, write_listops

    t0 = time.time()
    counts = write_listops(Path(args.root) / FOLDER, args.n_train, args.n_val, args.n_test,
                           seed=args.seed, force=args.force, max_depth=args.max_depth,
                           max_args=args.max_args, min_length=args.min_length,
                           max_length=args.max_length)
    print(f"wrote {Path(args.root) / FOLDER}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
          + f" ({time.time() - t0:.0f} s)")
    return 0


@_guard
def cmd_generate_pathfinder(args) -> int:
    """Write generated Pathfinder PNGs + metadata in the release layout under --root."""
    import time

    from .pathfinder import pathfinder_dir
    from .pathfinder_generator import PathfinderKnobs, write_pathfinder

    knobs = PathfinderKnobs(contour_length=args.contour_length,
                            distractor_length=args.distractor_length,
                            n_distractors=args.n_distractors, paddle_length=args.paddle_length,
                            paddle_margin=args.paddle_margin,
                            paddle_thickness=args.paddle_thickness, continuity=args.continuity,
                            marker_radius=args.marker_radius)
    difficulty = args.difficulty or f"curv_contour_length_{args.contour_length}"
    out = pathfinder_dir(args.root, args.resolution, difficulty)
    t0 = time.time()
    try:
        write_pathfinder(out, args.n_images, args.resolution, args.seed, knobs, force=args.force)
    except ValueError as e:  # knobs that cannot fit the image
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.n_images} images to {out} ({time.time() - t0:.0f} s)")
    return 0


def _longest(dataset) -> int:
    """Length of the longest sequence in `dataset` (either sequence of a pair item)."""
    longest = 0
    for i in range(len(dataset)):
        item = dataset[i]
        longest = max(longest, *(item[k].shape[0] for k in ("inputs", "inputs2") if k in item))
    return longest


@_guard
def cmd_fixtures(args) -> int:
    """Write tiny fixtures in the official formats for some or all tasks, then read them back."""
    import time

    from .fixtures import write_fixtures
    from .registry import load_task

    tasks = TASK_NAMES if args.tasks is None else [t.strip() for t in args.tasks.split(",")
                                                    if t.strip()]
    unknown = [t for t in tasks if t not in TASK_NAMES]
    if unknown:
        print(f"error: unknown task(s) {', '.join(unknown)}; choose from "
              f"{', '.join(TASK_NAMES)}", file=sys.stderr)
        return 1
    t0 = time.time()
    folders = write_fixtures(args.dir, tasks, seed=args.seed)
    for name, folder in folders.items():
        task = load_task(name, args.dir)
        splits = {"train": task.train, "val": task.val, "test": task.test}
        counts = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
        longest = max(_longest(v) for v in splits.values())
        print(f"{name}: {folder}: {counts}; longest {longest} (seq_len {task.spec.seq_len})")
    print(f"wrote {len(folders)} task(s) under {args.dir} ({time.time() - t0:.1f} s)")
    return 0


def add_data_commands(subparsers) -> argparse.ArgumentParser:
    """Register ``data {prepare,info,generate,fixtures}`` on `subparsers`; returns ``data``."""
    data = subparsers.add_parser("data", help="get, inspect or generate task data",
                                 description=__doc__.split("\n\n")[0])
    sub = data.add_subparsers(dest="data_command", required=True)

    def task_parser(name, help_):
        p = sub.add_parser(name, help=help_)
        p.add_argument("task", choices=TASK_NAMES)
        p.add_argument("--root", required=True, type=Path, help="data root folder")
        p.add_argument("--target", choices=("RR", "HR", "SpO2"),
                       help="bidmc only: which vital sign (default HR)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        return p

    p = task_parser("prepare", "download, unpack and verify a task's official files")
    p.add_argument("--source", help="use this URL or local file instead of the official URL")
    p.set_defaults(func=cmd_prepare)
    p = task_parser("info", "splits, sequence length, classes of a prepared task")
    p.add_argument("--difficulty",
                   help="pathfinder tasks only: the folder (curv_contour_length_14)")
    p.set_defaults(func=cmd_info)

    gen = sub.add_parser("generate", help="write synthetic data in the official formats")
    gsub = gen.add_subparsers(dest="generator", required=True)
    g = gsub.add_parser("listops", help="ListOps TSVs with the release's semantics")
    g.add_argument("--root", required=True, type=Path)
    g.add_argument("--n-train", type=int, default=96000)
    g.add_argument("--n-val", type=int, default=2000)
    g.add_argument("--n-test", type=int, default=2000)
    g.add_argument("--max-depth", type=int, default=10)
    g.add_argument("--max-args", type=int, default=10)
    g.add_argument("--min-length", type=int, default=500, help="symbols, exclusive")
    g.add_argument("--max-length", type=int, default=2000, help="symbols, exclusive")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--force", action="store_true", help="replace existing files")
    g.set_defaults(func=cmd_generate_listops)

    g = gsub.add_parser("pathfinder", help="Pathfinder PNGs + metadata (release layout)")
    g.add_argument("--root", required=True, type=Path)
    g.add_argument("--resolution", type=int, choices=(32, 64, 128, 256), default=32)
    g.add_argument("--n-images", type=int, default=10000)
    g.add_argument("--contour-length", type=int, default=14, help="dashes per contour")
    g.add_argument("--distractor-length", type=int, help="dashes per distractor (contour/3)")
    g.add_argument("--n-distractors", type=int, default=10)
    g.add_argument("--paddle-length", type=float, help="dash length in px (0.04 R)")
    g.add_argument("--paddle-margin", type=float, help="gap between dashes in px (0.02 R)")
    g.add_argument("--paddle-thickness", type=float, help="line width in px (max(1, R/48))")
    g.add_argument("--continuity", type=float, default=30.0, help="max turn per dash, degrees")
    g.add_argument("--marker-radius", type=float, help="px (max(1.2, 0.04 R))")
    g.add_argument("--difficulty", help="folder name (curv_contour_length_<contour-length>)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--force", action="store_true", help="replace an existing folder")
    g.set_defaults(func=cmd_generate_pathfinder)

    p = sub.add_parser("fixtures", help="tiny official-format data for every task (offline)",
                       description="Write a handful of examples per split for each task, in the "
                       "official on-disk formats at the paper's sequence lengths, under DIR (the "
                       "layout `spt data prepare` leaves), then read each back and print its "
                       "splits and longest sequence.")
    p.add_argument("dir", type=Path, metavar="DIR", help="data root to write into")
    p.add_argument("--tasks", help=f"comma-separated subset of {','.join(TASK_NAMES)} (all)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_fixtures)
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="spt")
    add_data_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
