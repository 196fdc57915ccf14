"""LRA ListOps: reader of the release's TSV files and a generator with the official semantics.

On disk (``ROOT/lra_release/listops-1000/basic_{train,val,test}.tsv``): a header
``Source\\tTarget``, then one example per line: a bracketed expression and its value 0-9, e.g.::

    ( ( ( [MAX 2 ) 9 ) ] )\\t9

Every operator node ``[OP a b ... ]`` is written as a left-nested chain of parentheses (one per
argument, plus one for the closing ``]``). Operators: ``[MIN``, ``[MAX``, ``[MED`` (median, rounded
down), ``[SM`` (sum modulo 10). Tokenisation follows the field (LRA / S4): parentheses dropped,
whitespace-separated symbols, ids ``N_SPECIAL + position in SYMBOLS``; 10-way classification.
Items: inputs (L,) long with L <= seq_len (2048; the release's sequences are < 2000 symbols).

Variants seen in ListOps files written by others (docs/data_real_format_check.md), read as the
release: no header line (the first line is then an example), and sum-modulo-10 spelled ``[SUM``
(same id as ``[SM``). Anything else (another header, quoted multi-line targets, unbalanced
parentheses or brackets, bytes that are not UTF-8) is an error naming the file and line.

Generator (:func:`generate_listops`): random trees as the release (an argument is an operator with
probability 0.25 below ``max_depth``, 2..``max_args`` arguments, ``min_length < symbols <
max_length``, duplicates removed), written in the same TSV format so the same reader reads them.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Optional

import numpy as np

from ..atomic import atomic_write
from .cache import cached_arrays
from .datasets import RaggedTokenDataset
from .errors import DataFormatError, DataMissingError
from .generated import GENERATED_MARK
from .source_files import text_lines
from .task import N_SPECIAL, Task, TaskSpec, no_examples_in, split_task

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
SYMBOLS = OPERATORS + (END,) + tuple(str(d) for d in range(10))
VOCAB = {s: N_SPECIAL + i for i, s in enumerate(SYMBOLS)}
ALIASES = {"[SUM": "[SM"}  # spellings of third-party ListOps files -> the release's symbol
VOCAB.update({a: VOCAB[s] for a, s in ALIASES.items()})
HEADER = ["Source", "Target"]
VOCAB_SIZE = N_SPECIAL + len(SYMBOLS)  # 19
SEQ_LEN = 2048
SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
FOLDER = Path("lra_release") / "listops-1000"
FORMAT_VERSION = 1


def tokenize(source: str) -> list[str]:
    """Symbols of a Source string, parentheses dropped: '( ( [SM 1 ) 2 ] )' -> [SM 1 2 ].

    Raises ValueError (saying which token) unless the parentheses balance and so do the operators
    and their ``]``: every ``)`` closes an earlier ``(``, every ``]`` an open operator, and nothing
    is left open at the end.
    """
    symbols, parens, ops = [], 0, []  # ops: token numbers of the operators not yet closed
    for i, t in enumerate(source.split(), start=1):
        if t == "(":
            parens += 1
        elif t == ")":
            if not parens:
                raise ValueError(f"unbalanced parentheses: ')' (token {i}) closes no '('")
            parens -= 1
        else:
            if t == END:
                if not ops:
                    raise ValueError(f"unbalanced brackets: ']' (token {i}) closes no operator")
                ops.pop()
            elif t[0] == "[":
                ops.append(i)
            symbols.append(t)
    if parens:
        raise ValueError(f"unbalanced parentheses: {parens} '(' never closed")
    if ops:
        raise ValueError(f"unbalanced brackets: {len(ops)} operator(s) never closed by ']' (the "
                         f"first at token {ops[0]})")
    return symbols


def _read_tsv(path: Path, seq_len: int, hint: str = ""):
    """Yield (ids list, label) per data line; raises DataFormatError naming path:line.

    hint : how to get a good copy of the file, appended to the error for bytes that are not UTF-8.
    """
    for lineno, line in text_lines(path, hint):
        if not line:
            continue
        fields = line.split("\t")
        if lineno == 1 and fields == HEADER:
            continue
        if lineno == 1 and not (len(fields) == 2 and any(t in VOCAB for t in fields[0].split())):
            raise DataFormatError(f"{path}:1: expected the header 'Source<TAB>Target' (or a "
                                  f"first example), got {line[:60]!r}")
        if len(fields) != 2:
            raise DataFormatError(f"{path}:{lineno}: expected 2 tab-separated fields "
                                  f"(Source, Target), got {len(fields)}")
        source, target = fields
        try:
            label = int(target)
        except ValueError:
            raise DataFormatError(f"{path}:{lineno}: Target {target[:20]!r} is not an "
                                  f"integer 0-9 (not a ListOps release file?)") from None
        if not 0 <= label <= 9:
            raise DataFormatError(f"{path}:{lineno}: Target {label} is outside 0-9")
        try:
            ids = [VOCAB[t] for t in tokenize(source)]
        except KeyError as e:
            raise DataFormatError(f"{path}:{lineno}: unknown ListOps symbol {e.args[0]!r} "
                                  f"(expected one of {' '.join(SYMBOLS)} and parentheses)"
                                  ) from None
        except ValueError as e:
            raise DataFormatError(f"{path}:{lineno}: {e} in Source {source[:60]!r}") from None
        if not ids:
            raise DataFormatError(f"{path}:{lineno}: empty Source")
        if len(ids) > seq_len:
            raise DataFormatError(f"{path}:{lineno}: {len(ids)} symbols exceed seq_len="
                                  f"{seq_len}; pass a larger seq_len")
        yield ids, label


def load_listops(root, seq_len: int = SEQ_LEN, folder: Optional[Path] = None) -> Task:
    """The ListOps task from ``root/lra_release/listops-1000`` (or `folder`), official splits."""
    data_dir = Path(folder) if folder is not None else Path(root) / FOLDER
    paths = {s: data_dir / f for s, f in SPLIT_FILES.items()}
    for p in paths.values():
        if not p.is_file():
            raise DataMissingError(f"ListOps file {p} not found. Run `spt data prepare listops "
                                   f"--root {root}` (or `spt data generate listops --root {root}` "
                                   f"offline).")

    hint = (f"Fetch it again (`spt data prepare listops --root {root}`) or convert it to UTF-8."
            if root is not None else "Fetch it again or convert it to UTF-8.")

    def build(w):
        tokens, labels, counts = w.ragged("tokens", np.uint8), [], {}
        for split, p in paths.items():
            n0 = len(labels)
            for ids, label in _read_tsv(p, seq_len, hint):
                tokens.append(ids)
                labels.append(label)
            counts[split] = len(labels) - n0
        w.put("labels", np.asarray(labels, np.int64))
        return {"counts": counts}

    arrays, extra = cached_arrays(data_dir, f"listops-L{seq_len}", FORMAT_VERSION,
                                  paths.values(), build)
    starts = np.cumsum([0] + [extra["counts"][s] for s in SPLIT_FILES])
    splits = {s: RaggedTokenDataset(arrays["tokens"], arrays["tokens.offsets"], arrays["labels"],
                                    np.arange(starts[i], starts[i + 1]))
              for i, s in enumerate(SPLIT_FILES)}
    spec = TaskSpec(name="listops", seq_len=seq_len, num_classes=10, vocab_size=VOCAB_SIZE,
                    mask_ratio=0.1, description="LRA ListOps: evaluate nested MIN/MAX/MED/"
                    "SUM-mod-10 expressions (10 classes), symbol tokens, parentheses dropped")
    return split_task(spec, splits, {s: no_examples_in(p) for s, p in paths.items()},
                      f"rerun `spt data prepare listops --root {root or 'ROOT'}` (or `spt data "
                      f"generate listops --root {root or 'ROOT'} --force` offline)")


# ----------------------------------------------------------------------------------- generator

def evaluate(op: str, args: list[int]) -> int:
    """The value of ``[op args... ]`` with the release's semantics."""
    if op == "[MIN":
        return min(args)
    if op == "[MAX":
        return max(args)
    if op == "[MED":
        return int(np.floor(np.median(args)))
    if op == "[SM":
        return sum(args) % 10
    raise ValueError(f"unknown operator {op!r}")


def _tree(rng: random.Random, depth: int, max_depth: int, max_args: int, budget: int):
    """(source string, value, n_symbols) of a random subtree, or None once n_symbols > budget."""
    if depth >= max_depth or rng.random() > 0.25:
        v = rng.randrange(10)
        return str(v), v, 1
    op = rng.choice(OPERATORS)
    n_args = rng.randint(2, max_args)
    parts, values, n = [], [], 2
    for _ in range(n_args):
        sub = _tree(rng, depth + 1, max_depth, max_args, budget - n)
        if sub is None:
            return None
        parts.append(sub[0])
        values.append(sub[1])
        n += sub[2]
        if n > budget:
            return None
    # left-nested parentheses as the release: ( ( ( [OP a ) b ) ] )
    source = "( " * (n_args + 1) + op + " " + " ) ".join(parts) + " ) ] )"
    return source, evaluate(op, values), n


# The fewest symbols of an expression with an operator: "[OP a b ]" (two digit arguments).
SMALLEST_EXPRESSION = 4
# Draws in a row that may give no new expression before generation gives up. With the release's
# knobs about 8% of draws are kept, so a run of 100,000 misses means the knobs (lengths, depth,
# arguments) admit too few distinct expressions for the number asked.
MAX_MISSES = 100_000


def longest_expression(max_depth: int, max_args: int) -> int:
    """The most symbols a generated expression can have: operators down to `max_depth`, each with
    `max_args` arguments (the root is at depth 1; depth max_depth holds digits only)."""
    length, cap = 1, 10 ** 9
    for _ in range(max(max_depth - 1, 0)):
        length = min(2 + max_args * length, cap)
    return length


def generate_listops(n: int, rng: random.Random, max_depth: int = 10, max_args: int = 10,
                     min_length: int = 500, max_length: int = 2000,
                     exclude: Optional[set] = None) -> list[tuple[str, int]]:
    """`n` distinct (Source, Target) pairs with min_length < symbols < max_length.

    Defaults are the release's (``max_depth=10, max_args=10, 500 < length < 2000``).
    `exclude`: sources already used (e.g. by other splits); updated in place.
    Raises ValueError when the knobs leave no length, or once MAX_MISSES draws in a row give no
    new expression (the knobs admit too few distinct ones).
    """
    if not 1 <= min_length + 1 < max_length:
        raise ValueError(f"need 0 <= min_length < max_length - 1, got {min_length}, {max_length}")
    seen = exclude if exclude is not None else set()
    out, misses = [], 0
    while len(out) < n:
        t = _tree(rng, 1, max_depth, max_args, max_length - 1)
        if t is None or not min_length < t[2] < max_length or t[0] in seen:
            misses += 1
            if misses >= MAX_MISSES:
                raise ValueError(
                    f"ListOps generator: found {len(out)} of {n} distinct expressions, then "
                    f"{MAX_MISSES:,} draws in a row gave no new one with {min_length} < symbols < "
                    f"{max_length} (max_depth {max_depth}, max_args {max_args}); widen the "
                    f"length range, raise max_depth / max_args, or ask for fewer examples")
            continue
        misses = 0
        seen.add(t[0])
        out.append((t[0], t[1]))
    return out


def write_listops(folder: Path, n_train: int, n_val: int, n_test: int, seed: int = 0,
                  force: bool = False, **knobs) -> dict:
    """Write ``basic_{train,val,test}.tsv`` in the release format into `folder`; returns counts.

    knobs: max_depth, max_args, min_length, max_length (see :func:`generate_listops`). Splits are
    disjoint. Existing files are replaced only with force=True. All three splits are generated
    before any file is written, and each file is written whole or not at all.
    """
    folder = Path(folder)
    targets = {s: folder / f for s, f in SPLIT_FILES.items()}
    if not force and any(p.exists() for p in targets.values()):
        raise FileExistsError(f"ListOps files exist in {folder}; pass force=True (--force) to "
                              f"replace them")
    rng, seen = random.Random(seed), set()
    rows = {split: generate_listops(n, rng, exclude=seen, **knobs)
            for split, n in (("train", n_train), ("val", n_val), ("test", n_test))}
    for split, split_rows in rows.items():
        atomic_write(targets[split], lambda tmp: _write_tsv(tmp, split_rows))
    counts = {split: len(split_rows) for split, split_rows in rows.items()}
    atomic_write(folder / GENERATED_MARK, lambda tmp: tmp.write_text(json.dumps(
        {"generator": "spt.data.listops", "seed": seed, "counts": counts, "knobs": knobs})))
    return counts


def _write_tsv(path: Path, rows: list[tuple[str, int]]) -> None:
    """The release's TSV: the header, then one ``Source<TAB>Target`` line per (source, value)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("Source\tTarget\n")
        f.writelines(f"{s}\t{v}\n" for s, v in rows)
