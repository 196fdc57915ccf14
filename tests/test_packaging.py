"""spt as an installed package: the wheel carries the notebooks and the commit, `spt study` finds
the notebooks without a checkout, `spt notebooks copy` gives editable copies, `spt --version`, and
a study run's missing packages are named. (`make test-wheel` installs the wheel into a fresh venv
and runs a smoke study; it needs network for pip, so it is not part of `make test`.)"""
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import spt
from spt.cli import main
from spt.studies.cli import missing_package_message
from spt.studies.commands import notebooks as nbs

ROOT = Path(__file__).resolve().parents[1]


def test_version_names_the_commit_of_the_checkout(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    m = re.fullmatch(r"spt (\S+) \(commit ([0-9a-f]{12}(-dirty)?|unknown), checkout (.+)\)", out)
    assert m, out
    assert m.group(1) == spt.__version__ and Path(m.group(4)) == ROOT
    if (ROOT / ".git").exists():
        assert m.group(2) != "unknown"


def test_notebooks_copy_gives_editable_copies_and_never_overwrites(tmp_path, capsys):
    dest = tmp_path / "mine"
    assert main(["notebooks", "copy", str(dest)]) == 0
    assert "jupyter lab" in capsys.readouterr().out
    ours = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(p.name for p in dest.glob("*.ipynb")) == ours
    (dest / "04_data_scales.ipynb").write_text("{}")
    assert main(["notebooks", "copy", str(dest)]) == 2
    assert "--force" in capsys.readouterr().err
    assert (dest / "04_data_scales.ipynb").read_text() == "{}"
    assert main(["notebooks", "copy", str(dest), "--force"]) == 0
    assert (dest / "04_data_scales.ipynb").read_bytes() == \
        (ROOT / "notebooks" / "04_data_scales.ipynb").read_bytes()
    assert main(["study", "list", "--notebooks", str(dest)]) == 0
    assert "04_data_scales" in capsys.readouterr().out


def test_study_finds_the_installed_notebooks_without_a_checkout(tmp_path, monkeypatch):
    """spt installed from its wheel: site-packages/spt/notebooks, no checkout above it."""
    site = tmp_path / "site-packages"
    (site / "spt" / "notebooks").mkdir(parents=True)
    (site / "spt" / "notebooks" / "04_data_scales.ipynb").write_text("{}")
    monkeypatch.setattr(nbs, "_PACKAGE", site / "spt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPT_NOTEBOOKS", raising=False)
    assert nbs.notebooks_dir() == site / "spt" / "notebooks"
    assert list(nbs.list_studies()) == ["04_data_scales"]
    (tmp_path / "notebooks").mkdir()  # a folder of the user's own copies wins
    (tmp_path / "notebooks" / "04_data_scales.ipynb").write_text("{}")
    assert nbs.notebooks_dir() == tmp_path / "notebooks"
    monkeypatch.setattr(nbs, "_PACKAGE", tmp_path / "empty" / "spt")
    with pytest.raises(FileNotFoundError, match="missing from this installation"):
        nbs.packaged_notebooks()
    with pytest.raises(FileNotFoundError, match=r"no notebooks \(\*\.ipynb\) in .* --notebooks"):
        nbs.notebooks_dir(tmp_path / "empty")


def test_a_missing_study_package_says_what_to_install(monkeypatch, capsys):
    from spt.studies.commands import runner

    def no_papermill(*a, **k):
        raise ModuleNotFoundError("No module named 'papermill'", name="papermill")

    monkeypatch.setattr(runner, "run_study", no_papermill)
    assert main(["study", "run", "04_data_scales", "--preset", "smoke", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert "No module named 'papermill'" in err and "pip install papermill ipykernel" in err
    assert missing_package_message(ModuleNotFoundError("x", name="transformers")) == "x"


def test_the_wheel_carries_the_notebooks_the_data_files_and_the_commit(tmp_path):
    """The wheel as `python -m build --wheel` makes it (hatchling, no network: --no-isolation)."""
    pytest.importorskip("hatchling")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("spt-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"spt-{spt.__version__}.dist-info/METADATA").decode()
        commit = z.read("spt/COMMIT").decode().strip() if "spt/COMMIT" in names else None
    ours = {f"spt/notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert len(ours) > 10 and ours <= names
    assert {"spt/paper/settings.tsv", "spt/samples/kernels.nc", "spt/cli.py"} <= names
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]
    requires = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)[^;\n]*$", meta, re.M)
    assert {"papermill", "ipykernel", "matplotlib", "ipywidgets", "torch"} <= set(requires)
    if (ROOT / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit or "")


def test_environment_yml_installs_what_pip_installs():
    """conda's environment.yml ends in the pip install docs/install.md shows (not an editable one),
    with extras pyproject.toml defines."""
    from importlib.metadata import metadata

    import yaml
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert len(pip) == 1 and pip[0].startswith(".[")
    extras = set(pip[0][2:-1].split(","))
    assert extras <= set(metadata("spt").get_all("Provides-Extra")) and "notebooks" in extras
    assert f'pip install "{pip[0]}"' in (ROOT / "docs" / "install.md").read_text()
