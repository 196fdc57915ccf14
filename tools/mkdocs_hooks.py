"""MkDocs hooks (mkdocs.yml `hooks:`): the site is the README, the pages under docs/ and two
rendered notebooks, side by side at one root.

The README is the home page: its links `docs/PAGE.md` become `PAGE.md`. A page under docs/ links
to the README and the notebooks as `../README.md` and `../notebooks/NAME.ipynb` (right on GitHub),
which lose their `../` on the site. The notebooks are the ones `make docs` executed into
build/docs/notebooks/; where that has not run, the committed ones (no outputs), which is enough
for the link check (tests/test_docs.py).

Docstrings cross-reference in Sphinx roles (:func:`~spt.hub.load_model`); on the site each becomes
a link to that object's API entry where one is rendered, else plain code."""
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

# a role as mkdocstrings renders it from Markdown: :func:<code>~spt.hub.load_model</code>
ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):<code>(~?)([\w.]+)</code>")
ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ("00_quickstart", "10_walkthrough")
EXECUTED = ROOT / "build" / "docs" / "notebooks"


def notebook_root(name: str) -> Path:
    """The folder whose notebooks/NAME.ipynb the site renders: build/docs when `make docs` executed
    it there, else the repository (the committed notebook)."""
    return EXECUTED.parent if (EXECUTED / f"{name}.ipynb").is_file() else ROOT


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns *.ipynb files into pages
def on_files(files, config):
    files.append(File.generated(config, "README.md", abs_src_path=str(ROOT / "README.md")))
    for name in NOTEBOOKS:
        # a File read from its folder: mkdocs-jupyter's wrapper does not see a generated file's path
        files.append(File(f"notebooks/{name}.ipynb", str(notebook_root(name)), config.site_dir,
                          config.use_directory_urls))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "README.md":
        return re.sub(r"\]\(docs/", "](", markdown)
    return re.sub(r"\]\(\.\./", "](", markdown)


def on_page_content(html, page, config, files):
    # an optional mkdocs-autorefs reference: resolved later into a link, or left as plain code
    return ROLE.sub(lambda m: f'<autoref identifier="{m[2]}" optional><code>'
                              f'{m[2].rsplit(".", 1)[-1] if m[1] else m[2]}</code></autoref>', html)
