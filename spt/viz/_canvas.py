"""A figure that lives inside an ipywidgets layout and is redrawn in place.

In a Jupyter kernel with ipympl installed, the figure gets an ipympl ``Canvas`` (an interactive
widget: pan / zoom, and ``draw_idle`` sends only the new image). Anywhere else (plain Python, tests,
a kernel without ipympl) it gets an Agg canvas and is shown as an ``ipywidgets.Image`` whose PNG
is replaced on each redraw. Either way, explorers change line data and axes on the same Figure and
call :meth:`FigureHost.redraw`; no new figure is ever made and no output is cleared.
"""
from __future__ import annotations

import io
from typing import Optional

import ipywidgets as W
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def in_kernel() -> bool:
    """True inside a running IPython kernel (Jupyter, papermill), False in plain Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class FigureHost:
    """Owns a Figure and the widget that shows it.

    fig        : the matplotlib Figure (draw on it, then call redraw()).
    widget     : the ipympl Canvas (interactive) or an ipywidgets.Image (static fallback).
    interactive: whether the ipympl canvas is used.
    """

    def __init__(self, figsize=(9, 3.6), interactive: Optional[bool] = None):
        self.fig = Figure(figsize=figsize, layout="constrained")
        want = in_kernel() if interactive is None else interactive
        self.interactive = False
        if want:
            try:
                from ipympl.backend_nbagg import Canvas, FigureManager
            except ImportError:  # no ipympl: the static fallback below
                pass
            else:
                canvas = Canvas(self.fig)
                FigureManager(canvas, num=id(self))
                canvas.header_visible = False
                canvas.toolbar_position = "right"
                self.widget = canvas
                self.interactive = True
        if not self.interactive:
            FigureCanvasAgg(self.fig)
            self.widget = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.redraws = 0

    def redraw(self) -> None:
        """Show the current state of the figure (in place)."""
        self.redraws += 1
        if self.interactive:
            self.fig.canvas.draw_idle()
            return
        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=80)
        self.widget.value = buf.getvalue()
