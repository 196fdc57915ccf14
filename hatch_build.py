"""Build hook (hatchling) for what a wheel carries beyond the spt/ package:

* the checkout's ``notebooks/`` as ``spt/notebooks/``, where `spt study` and `spt notebooks copy`
  find them without a checkout (spt.studies.notebooks);
* the git commit it is built from as ``spt/COMMIT``, which `spt --version` and the provenance of
  every result file and checkpoint read where there is no checkout (spt.provenance). An sdist
  built from a checkout carries the file too, so a wheel built from that sdist keeps it.

An editable install gets neither: it runs from the checkout, which has both (configured here, not
as a force-include in pyproject.toml, because hatchling would copy a force-include into
site-packages for an editable install too: a stale second copy of the notebooks).
"""
import sys
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class SptBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if version == "editable":
            return
        root = Path(self.root)
        if self.target_name == "wheel":
            build_data["force_include"][str(root / "notebooks")] = "spt/notebooks"
        if (root / "spt" / "COMMIT").is_file():  # a build from an sdist: its file is kept
            return
        sys.path.insert(0, self.root)
        try:
            from spt.provenance import checkout, git_commit
            commit = git_commit(root) if checkout() else None
        finally:
            sys.path.remove(self.root)
        if commit:
            self._commit_file = Path(tempfile.mkdtemp()) / "COMMIT"
            self._commit_file.write_text(commit + "\n")
            build_data["force_include"][str(self._commit_file)] = "spt/COMMIT"

    def finalize(self, version, build_data, artifact_path):
        f = getattr(self, "_commit_file", None)
        if f is not None:
            f.unlink()
            f.parent.rmdir()
