"""The measured numbers of the README and docs/measured_times.md agree with the docs that record
their runs: every decimal number, wall time, date and test count in a row of the README's
quick-start and laptop-results tables and of the measured-times table appears in the file that row
names, so a rerun written into one place cannot leave the other behind. And the README stays a
landing page."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# decimals (79.5, +18.3, -2.4%), wall times (14m27s, 118 s), dates, test counts (890 passed)
FIGURE = re.compile(r"[-+]?\d+\.\d+%?|\d+m\d+s|\b\d+ s\b|\d{4}-\d\d-\d\d|\b\d+ (?:passed|skipped)\b")
# (file, marker): the Markdown table right after the comment `<!-- marker:` in that file
TABLES = [(README, "quick-start"), (README, "laptop-results"),
          (ROOT / "docs" / "measured_times.md", "measured-times")]


def table_rows(text: str, marker: str) -> list:
    """The body rows (cells) of the Markdown table right after the comment naming `marker`."""
    start = text.index(f"<!-- {marker}:")
    rows = []
    for line in text[start:].splitlines()[1:]:
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


def missing_figures(cells: list, root: Path = ROOT) -> list:
    """The figures of a table row that the file named in its last cell lacks."""
    doc = root / cells[-1].strip("`")
    assert doc.is_file(), f"row {cells[0]!r} names {doc}, which does not exist"
    text = doc.read_text(encoding="utf-8")
    figures = set(FIGURE.findall(" | ".join(cells[:-1])))
    assert figures, f"row {cells[0]!r} states no figure"
    return sorted(f for f in figures if f not in text and f.rstrip("%") not in text)


@pytest.mark.parametrize("path, marker", TABLES, ids=[m for _, m in TABLES])
def test_every_figure_of_a_table_row_is_in_its_details_file(path, marker):
    rows = table_rows(path.read_text(encoding="utf-8"), marker)
    assert len(rows) >= 2
    for cells in rows:
        missing = missing_figures(cells)
        assert not missing, f"{path.name} row {cells[0]!r}: {missing} not in {cells[-1]}"


def test_the_laptop_results_lie_between_their_markers():
    """A generator rewrites what lies between the two marker lines: the table must be all of it."""
    text = README.read_text(encoding="utf-8")
    inside = text[text.index("<!-- laptop-results:start -->\n"):text.index("<!-- laptop-results:end -->")]
    lines = inside.splitlines()[1:]
    assert len(lines) >= 7 and all(line.startswith("|") for line in lines), inside
    assert len(table_rows(text, "laptop-results")) == len(lines) - 2  # all but header and rule


def test_the_quick_start_times_both_commands():
    rows = table_rows(README.read_text(encoding="utf-8"), "quick-start")
    assert [r[0] for r in rows] == ["`make demo`", "`make test`"]
    assert all(re.search(r"\d+m\d+s", r[2]) for r in rows), rows


def test_the_readme_is_a_landing_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150, "the README is the landing page: move details to docs/"
    # `spt` is on PATH only inside the venv: the README says so before its first bare `spt` command
    first_spt = re.search(r"^spt ", text, re.M).start()
    assert "source .venv/bin/activate" in text[:first_spt]


def test_the_check_finds_a_figure_that_drifted(tmp_path):
    assert figures_in("SPT 79.5 vs. 61.2: +18.3, -2.4%, 14m27s, 118 s, 2026-11-24, 890 passed") >= {
        "79.5", "+18.3", "-2.4%", "-2.4", "14m27s", "118 s", "2026-11-24", "890 passed"}
    (tmp_path / "details.md").write_text("took 14m27s on 2026-11-24: 890 passed")
    table = ("<!-- t: x -->\n| what | time | details |\n|---|---|---|\n"
             "| demo | 14m27s (2026-11-24), 891 passed | `details.md` |\n")
    assert missing_figures(table_rows(table, "t")[0], tmp_path) == ["891 passed"]
