"""A study's implementation paths: `spt tune` measures them ahead and a second call answers from
the cache; a study run records each cell's paths in its results, and the same study run at
paths="reference" reuses those results (paths are not part of a cell's identity)."""
import pytest

from spt.cli import main
from spt.results import provenance
from spt.studies.data_scales import STUDY


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPT_PATHS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_spt_tune_prints_the_measured_candidates_and_a_second_call_answers_from_the_cache(
        cache, capsys):
    assert main(["tune", "04_data_scales", "--preset", "smoke", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if " measured" in line and "ms" not in line]
    timed = [r for r in rows if r[-1] == "measured" and any(w in ("chosen", "slower") for w in r)]
    kinds = {r[r.index("pretrain") + 1] for r in timed if "pretrain" in r}
    assert {"fft_conv", "step"} <= kinds, out  # two measured candidates each, and a choice
    assert sum("chosen" in r for r in timed) >= 3 and any("slower" in r for r in timed), out
    assert "skipped: Triton runs on a CPU only in its interpreter" in out
    said = out.strip().splitlines()[-1]
    assert said.startswith(tuple(f"{n} choices measured now" for n in range(1, 20))), said
    assert main(["tune", "04_data_scales", "--preset", "smoke", "--device", "cpu"]) == 0
    again = capsys.readouterr().out.strip().splitlines()[-1]
    assert again.startswith("0 choices measured now") and "answered from the cache" in again


def test_a_study_run_records_every_cells_paths_and_a_reference_run_reuses_them(cache, tmp_path):
    ds = STUDY.run("smoke", tmp_path / "out")
    table = provenance(ds)
    assert len(table) == 6 and table["paths"].str.contains("fft_conv torch").all()
    assert table["paths"].str.contains("step eager").all()
    spt_cells = table[table["init"] == "spt"]["paths"]
    assert spt_cells.str.startswith("pretrain: ").all() and spt_cells.str.contains("finetune: ").all()
    files = sorted((tmp_path / "out" / STUDY.name).glob("*.nc"))
    stamps = {f: f.stat().st_mtime_ns for f in files}
    again = STUDY.run("smoke", tmp_path / "out", paths="reference")
    assert {f: f.stat().st_mtime_ns for f in files} == stamps  # reused, not recomputed
    assert again.test_accuracy.equals(ds.test_accuracy)
