"""make laptop-results: the docs sections and the README's table from the runs, between markers."""
import numpy as np
import pytest
import xarray as xr

from spt.studies import laptop_results as L


def quickstart_ds(spt, scratch):
    acc = np.array([scratch, spt]) / 100
    return xr.Dataset({"test_accuracy": (("init", "seed"), acc)},
                      coords={"init": ["scratch", "spt"], "seed": range(len(spt))})


def test_the_quickstart_headline_is_the_mean_gap_and_the_seeds_ahead():
    ds = quickstart_ds([80.0, 70.0, 60.0], [60.0, 60.0, 65.0])
    from spt.studies.quickstart import headline
    assert headline(ds) == ("SPT 70.0 vs. scratch 61.7: +8.3 points, SPT ahead on "
                              "2 of 3 seeds, by 10 points or more on 2")


class FakeStudy:
    def table(self, ds):
        return ds["test_accuracy"].to_dataframe()


def test_regenerating_one_study_rewrites_its_section_and_only_the_readme_block(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{L.START}\nold table\n{L.END}\noutro\n", encoding="utf-8")
    docs = tmp_path / "docs" / "laptop_results.md"
    docs.parent.mkdir()
    kept = "## 01_lra_transformers\n\n<!-- row: | 01 Table 1 | x | kept 1.5 | abc | 2026-01-01 | y | -->\n"
    docs.write_text(L.docs_text(L.read_sections("# t\n\n" + kept)), encoding="utf-8")
    studies = L.laptop_studies()
    quick = next(s for s in studies if s.name == "00_quickstart")
    fake = quick.__class__(quick.label, quick.name, FakeStudy(), quick.command, quick.headline)
    monkeypatch.setattr(L, "laptop_studies", lambda: (fake, *[s for s in studies if s is not quick]))
    ds = quickstart_ds([80.0, 90.0], [60.0, 70.0])
    table = L.regenerate(["00_quickstart"], tmp_path / "results", docs, readme,
                         run=lambda study, out, w: ds, rev="1234abc")
    text = readme.read_text(encoding="utf-8")
    assert text.startswith(f"intro\n{L.START}\n| study |") and text.endswith(f"{L.END}\noutro\n")
    assert "old table" not in text and table in text
    rows = [r for r in table.splitlines()[2:]]
    assert rows[0].startswith("| 00 quickstart |") and "SPT 85.0 vs. scratch 65.0: +20.0" in rows[0]
    assert "| 1234abc |" in rows[0] and "kept 1.5" in rows[1]
    assert "## 00_quickstart" in docs.read_text() and "## 01_lra_transformers" in docs.read_text()


def test_missing_markers_fail_before_anything_runs(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("a README without the markers\n", encoding="utf-8")
    ran = []
    with pytest.raises(L.MarkersMissing, match="laptop-results:start"):
        L.regenerate(["00_quickstart"], tmp_path, tmp_path / "d.md", readme,
                     run=lambda *a: ran.append(a))
    assert not ran and readme.read_text() == "a README without the markers\n"


def test_an_unknown_study_is_named():
    with pytest.raises(ValueError, match="02_nothing"):
        L.regenerate(["02_nothing"])


def test_the_laptop_studies_are_the_registry_studies_with_a_laptop_preset():
    from spt.studies import QUICKSTART, STUDIES
    names = [s.name for s in L.laptop_studies()]
    assert names == [s.name for s in (QUICKSTART, *STUDIES.values()) if "laptop" in s.presets]
    assert {"00_quickstart", "13_modern_architectures", "14_priors_and_range"} <= set(names)
    row = {s.name: s for s in L.laptop_studies()}["13_modern_architectures"]
    assert row.headline is STUDIES["13_modern_architectures"].headline and row.extra is not None
    assert row.command == "`spt study run 13_modern_architectures --preset laptop` (3 seeds)"
