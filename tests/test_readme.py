"""The README's measured numbers agree with the docs that record their runs: every decimal number
and wall time in a row of its laptop-results and measured-times tables appears in the file that
row names, so a rerun written into one place cannot leave the other behind."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# decimals (79.5, +18.3, -2.4%), wall times (14m27s, 118 s), dates
FIGURE = re.compile(r"[-+]?\d+\.\d+%?|\d+m\d+s|\b\d+ s\b|\d{4}-\d\d-\d\d")


def table_rows(marker: str) -> list:
    """The body rows (cells) of the Markdown table right after the comment naming `marker`."""
    start = README.index(f"<!-- {marker}:")
    rows = []
    for line in README[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    return rows[1:]  # without the header


def figures_in(text: str) -> set:
    found = set()
    for f in FIGURE.findall(text):
        found.add(f)
        if f.endswith("%"):
            found.add(f[:-1])
    return found


@pytest.mark.parametrize("marker", ["laptop-results", "measured-times"])
def test_every_figure_of_a_readme_row_is_in_its_details_file(marker):
    rows = table_rows(marker)
    assert len(rows) >= 5
    for cells in rows:
        doc = ROOT / cells[-1].strip("`")
        assert doc.is_file(), f"README row {cells[0]!r} names {doc}, which does not exist"
        text = doc.read_text(encoding="utf-8")
        figures = {f for f in FIGURE.findall(" | ".join(cells[:-1]))}
        assert figures, f"README row {cells[0]!r} states no figure"
        missing = sorted(f for f in figures if f not in text and f.rstrip("%") not in text)
        assert not missing, f"README row {cells[0]!r}: {missing} not in {doc.name}"


def test_the_check_finds_a_figure_that_drifted(tmp_path):
    assert figures_in("SPT 79.5 vs. 61.2: +18.3, -2.4%, 14m27s, 118 s, 2026-11-24") >= {
        "79.5", "+18.3", "-2.4%", "-2.4", "14m27s", "118 s", "2026-11-24"}
