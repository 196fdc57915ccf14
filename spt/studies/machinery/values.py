"""Values of the paper-settings table (spt/paper/settings.tsv): how one is read, compared
with spt's and written back."""
from __future__ import annotations

import math

ANY = "any"


def parse_value(raw: str):
    """A table value: none, true / false, any, a number, a comma-separated list, or a word."""
    if raw in ("none", "true", "false", ANY):
        return {"none": None, "true": True, "false": False, ANY: ANY}[raw]
    if "," in raw:
        return tuple(parse_value(p) for p in raw.split(","))
    try:
        return float(raw)
    except ValueError:
        return raw


def same(ours, theirs) -> bool:
    """Whether our value equals the reference value (numbers to 1e-9 relative)."""
    if theirs == ANY:
        return True
    if isinstance(theirs, tuple) or isinstance(ours, (tuple, list)):
        if not isinstance(theirs, tuple) or not isinstance(ours, (tuple, list)):
            return False
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs))
    if isinstance(theirs, bool) or isinstance(ours, bool):
        return ours is theirs or ours == theirs and type(ours) is type(theirs)
    if isinstance(theirs, float) and isinstance(ours, (int, float)):
        return math.isclose(float(ours), theirs, rel_tol=1e-9, abs_tol=1e-12)
    return ours == theirs


def show(value) -> str:
    """A value as the table writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(show(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
