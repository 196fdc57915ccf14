"""A study notebook's output, line by line on stderr while papermill runs it (the CLI and SLURM
tasks): papermill logs each output line; this sends them to the current sys.stderr without
papermill's cell markers."""
from __future__ import annotations

import logging
import sys


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a line is logged, not the one it started with."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _):
        pass


class _OneLine(logging.Formatter):
    """The message without the trailing newline the notebook's print left on it."""

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage().rstrip("\n")


# whether the notebook has said that a Ctrl-C stopped it (its study's own line, with how many
# cells are done and where), so that `spt` does not say so a second time
said: dict = {"interrupted": False}


def _notebook_output_only(record: logging.LogRecord) -> bool:
    """The notebook's own output lines, without papermill's cell markers and blank lines."""
    text = record.getMessage().strip()
    if ": interrupted with " in text:  # spt.studies.machinery.cells.run_cells on a KeyboardInterrupt
        said["interrupted"] = True
    return bool(text) and not text.startswith(("Executing Cell", "Ending Cell",
                                               "Executing notebook with kernel"))


def stream_notebook_output(quiet: bool = False) -> bool:
    """Send papermill's log (the notebook's output as it runs) to stderr, one line each."""
    if quiet:
        return False
    log = logging.getLogger("papermill")
    if not any(getattr(h, "spt_stream", False) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(_OneLine())
        handler.addFilter(_notebook_output_only)
        handler.spt_stream = True  # added once per process, however often the CLI runs
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return True
