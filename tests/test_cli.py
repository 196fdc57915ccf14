"""The `spt` command and the README's Python example."""
import json
import re
import subprocess
import sys
from pathlib import Path

from spt.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_spt_help_lists_commands():
    r = subprocess.run([sys.executable, "-m", "spt.cli", "--help"], capture_output=True, text=True,
                       check=True)
    for cmd in ("env", "presets", "data"):
        assert re.search(rf"^\s+{cmd}\s", r.stdout, re.M), r.stdout


def test_spt_env_json(capsys):
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["torch"] and info["cuda_available"] in (True, False)


def test_spt_presets_prints_table4(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "listops" in out and "pathx" in out and "rotary_masked" in out


def test_readme_python_example_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has a python example"
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert 0.0 <= namespace["ft"].test_metrics["accuracy"] <= 1.0
