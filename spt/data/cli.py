"""`spt data prepare | info | generate | fixtures`: the data commands (:func:`add_data_commands`
adds them to the `spt` parser).

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
import math
import sys
from pathlib import Path

from .errors import DataError
from .prepare import PrepareError
from .registry import TASK_NAMES

ACTIONABLE = (DataError, PrepareError, FileExistsError)

DESCRIPTION = (
    "Get, inspect and make the data of the paper's tasks, under a data root folder (--root). "
    "`prepare` downloads a task's official files, unpacks and checks them; `info` reads a task "
    "and prints its splits, sequence length and classes; `generate` writes synthetic ListOps or "
    "Pathfinder data in the official layout (offline); `fixtures` writes a tiny copy of every "
    "task for offline checks.")


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
    try:
        counts = write_listops(Path(args.root) / FOLDER, args.n_train, args.n_val, args.n_test,
                               seed=args.seed, force=args.force, max_depth=args.max_depth,
                               max_args=args.max_args, min_length=args.min_length,
                               max_length=args.max_length)
    except ValueError as e:  # knobs that admit too few distinct expressions
        print(f"error: {e}", file=sys.stderr)
        return 1
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


# ------------------------------------------------------------------ argument checks
# Each numeric argument is checked as it is parsed (argparse: exit code 2, one line naming the
# flag, its range and why); the checks between arguments run right after parsing, before any
# work, through the same parser.

def _number(kind: type, lo=None, hi=None, why: str = "", lo_open: bool = False):
    """An argparse type: a finite `kind` (int or float) in [lo, hi] ((lo, hi] if lo_open)."""
    if lo is not None and hi is not None:
        allowed = f"in ({lo}, {hi}]" if lo_open else f"in {lo}..{hi}"
    elif lo is not None:
        allowed = f"> {lo}" if lo_open else f">= {lo}"
    else:
        allowed = f"<= {hi}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}"
                                             f", got {text!r}") from None
        ok = math.isfinite(value) and (lo is None or (value > lo if lo_open else value >= lo)) \
            and (hi is None or value <= hi)
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text}: {why}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _checked(parser: argparse.ArgumentParser, conflict, fn):
    """`fn` run after `conflict(args)` (a message, or None) has found no clash between arguments;
    a clash is reported by `parser` as a usage error (exit code 2)."""
    def run(args) -> int:
        problem = conflict(args)
        if problem:
            parser.error(problem)
        return fn(args)
    run.__doc__ = fn.__doc__
    return run


def _listops_conflict(args):
    """Why the ListOps lengths, depth and arguments admit no expression, or None."""
    from .listops import longest_expression

    if args.max_length <= args.min_length + 1:
        return (f"--max-length {args.max_length} leaves no length: an expression needs "
                f"--min-length {args.min_length} < symbols < --max-length, so --max-length must "
                f"be at least {args.min_length + 2} (or lower --min-length)")
    longest = longest_expression(args.max_depth, args.max_args)
    if longest <= args.min_length:
        return (f"--min-length {args.min_length} cannot be met: with --max-depth {args.max_depth} "
                f"and --max-args {args.max_args} the longest expression has {longest} symbols; "
                f"raise --max-depth or --max-args, or lower --min-length")
    return None


def _add_listops_generator(gsub) -> None:
    from .listops import SEQ_LEN, SMALLEST_EXPRESSION

    g = gsub.add_parser("listops", help="ListOps TSVs with the release's semantics")
    g.add_argument("--root", required=True, type=Path)
    split = _number(int, 1, why="every split needs examples (an empty split cannot be read)")
    g.add_argument("--n-train", type=split, default=96000)
    g.add_argument("--n-val", type=split, default=2000)
    g.add_argument("--n-test", type=split, default=2000)
    g.add_argument("--max-depth", type=_number(int, 2, why="the root is depth 1 and operators "
                   "need their arguments one level deeper; at 1 every expression is one digit"),
                   default=10)
    g.add_argument("--max-args", type=_number(int, 2, why="an operator takes 2 to --max-args "
                   "arguments"), default=10)
    g.add_argument("--min-length", type=_number(int, 0, SEQ_LEN - 1, why="symbols, exclusive; "
                   f"the reader takes up to {SEQ_LEN}"), default=500, help="symbols, exclusive")
    g.add_argument("--max-length", type=_number(
        int, SMALLEST_EXPRESSION + 1, SEQ_LEN + 1, why=f"symbols, exclusive: the smallest "
        f"expression, [OP a b ], has {SMALLEST_EXPRESSION} symbols, and ListOps is read with "
        f"seq_len {SEQ_LEN}, so a longer one would not load"), default=2000,
        help="symbols, exclusive")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--force", action="store_true", help="replace existing files")
    g.set_defaults(func=_checked(g, _listops_conflict, cmd_generate_listops))


def _add_pathfinder_generator(gsub) -> None:
    from .pathfinder import SPLIT

    g = gsub.add_parser("pathfinder", help="Pathfinder PNGs + metadata (release layout)")
    g.add_argument("--root", required=True, type=Path)
    g.add_argument("--resolution", type=int, choices=(32, 64, 128, 256), default=32)
    fewest = round(1 / min(SPLIT))
    g.add_argument("--n-images", type=_number(int, fewest, why=f"the reader's 80/10/10 split "
                   f"needs {fewest} images for one in each of val and test"), default=10000)
    dashes = _number(int, 1, why="a contour is drawn as dashes, at least one")
    g.add_argument("--contour-length", type=dashes, default=14, help="dashes per contour")
    g.add_argument("--distractor-length", type=dashes, help="dashes per distractor (contour/3)")
    g.add_argument("--n-distractors", type=_number(int, 0, why="a count"), default=10)
    g.add_argument("--paddle-length", type=_number(float, 0, why="a dash must have a length",
                   lo_open=True), help="dash length in px (0.04 R)")
    g.add_argument("--paddle-margin", type=_number(float, 0, why="a gap cannot be negative"),
                   help="gap between dashes in px (0.02 R)")
    g.add_argument("--paddle-thickness", type=_number(float, 0, why="a line must have a width",
                   lo_open=True), help="line width in px (max(1, R/48))")
    g.add_argument("--continuity", type=_number(float, 0, 180, why="the largest turn between "
                   "two dashes, in degrees"), default=30.0, help="max turn per dash, degrees")
    g.add_argument("--marker-radius", type=_number(float, 0, why="a marker must be visible",
                   lo_open=True), help="px (max(1.2, 0.04 R))")
    g.add_argument("--difficulty", help="folder name (curv_contour_length_<contour-length>)")
    g.add_argument("--seed", type=_number(int, 0, why="numpy's random generator takes "
                   "non-negative seeds"), default=0)
    g.add_argument("--force", action="store_true", help="replace an existing folder")
    g.set_defaults(func=cmd_generate_pathfinder)


def add_data_commands(subparsers) -> argparse.ArgumentParser:
    """Register ``data {prepare,info,generate,fixtures}`` on `subparsers`; returns ``data``."""
    data = subparsers.add_parser("data", help="get, inspect or generate task data",
                                 description=DESCRIPTION)
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
    _add_listops_generator(gsub)
    _add_pathfinder_generator(gsub)

    p = sub.add_parser("fixtures", help="tiny official-format data for every task (offline)",
                       description="Write a handful of examples per split for each task, in the "
                       "official on-disk formats at the paper's sequence lengths, under DIR (the "
                       "layout `spt data prepare` leaves), then read each back and print its "
                       "splits and longest sequence.")
    p.add_argument("dir", type=Path, metavar="DIR", help="data root to write into")
    p.add_argument("--tasks", help=f"comma-separated subset of {','.join(TASK_NAMES)} (all)")
    p.add_argument("--seed", type=_number(int, 0, why="numpy's random generator takes "
                   "non-negative seeds"), default=0)
    p.set_defaults(func=cmd_fixtures)
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="spt")
    add_data_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
