"""The docs site (mkdocs.yml) builds with no broken link, missing anchor, missing page or page left
out of the nav (`mkdocs build --strict`, the committed notebooks unexecuted: seconds), and that
check does fail on each of those. Paths the pages name in code spans (`docs/x.md`) exist."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], capture_output=True, text=True, env=ENV, cwd=config.parent)


def test_the_site_builds_with_no_broken_link(tmp_path):
    r = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr
    for page in ("index.html", "quickstart.html", "notebooks/00_quickstart.html",
                 "notebooks/10_walkthrough.html", "api/train.html"):
        assert (tmp_path / "site" / page).is_file(), page
    api = (tmp_path / "site" / "api" / "train.html").read_text(encoding="utf-8")
    assert "Self-pretrain a per-position model" in api  # pretrain's docstring, rendered
    assert "<code>trust_remote_code</code>: needed" in api  # an argument list as a list
    assert 'href="hub.html#spt.hub.export_checkpoint"' in api  # a Sphinx role as a link
    assert ":func:" not in api


def test_a_broken_link_or_missing_page_fails_the_build(tmp_path):
    """A copy of the site's sources with one defect of each kind: all four named, build refused."""
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "tools").mkdir()
    for name in ("mkdocs_hooks.py", "griffe_docstrings.py"):
        shutil.copy(ROOT / "tools" / name, tmp_path / "tools")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    (tmp_path / "spt").symlink_to(ROOT / "spt")
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text() + "\n[gone](docs/no_such_page.md)\n")
    studies = tmp_path / "docs" / "studies.md"
    studies.write_text(studies.read_text() + "\n[here](data.md#no-such-section)\n")
    (tmp_path / "docs" / "orphan.md").write_text("# Not in the nav\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(config.read_text().replace("- api/viz.md", "- api/viz.md\n      - api/missing.md"))
    r = build(config, tmp_path / "site")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "no_such_page.md" in out and "#no-such-section" in out, out
    assert "orphan.md" in out and "api/missing.md" in out, out


def test_every_docs_path_the_pages_name_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        # lower case: `docs/PAGE.md` is a placeholder
        for path in re.findall(r"`(docs/[a-z0-9_/.-]+\.md)`", page.read_text(encoding="utf-8")):
            assert (ROOT / path).is_file(), f"{page.relative_to(ROOT)} names {path}, which does not exist"
