"""The common shape of the explorers: named widgets, one figure redrawn in place, one layout.

An explorer displays itself (put it last in a notebook cell). Tests drive it without a browser:
set ``ex.widgets["layer"].value = 2`` and read ``ex.fig`` / ``ex.lines``; outside a kernel the
``observe`` callbacks run synchronously.
"""
from __future__ import annotations

from typing import Optional

import ipywidgets as W

from ._canvas import FigureHost


class Explorer:
    """Base class. Subclasses fill ``self.widgets`` (name -> widget) and ``self.lines`` (name ->
    Line2D), draw once in ``_build()``, update artists in ``update()``.

    fig     : the matplotlib Figure (the same object for the explorer's whole life).
    widgets : dict of the control widgets, by name.
    box     : the ipywidgets layout (controls above the figure widget).
    host    : the :class:`FigureHost` (``host.redraws`` counts redraws).
    """

    def __init__(self, figsize=(9, 3.6), interactive: Optional[bool] = None):
        self.host = FigureHost(figsize, interactive)
        self.fig = self.host.fig
        self.widgets: dict = {}
        self.lines: dict = {}
        self.status = W.HTML()
        self._extra: list = []  # dims with a "mean or one value" dropdown (see _extra_dims)

    def _extra_dims(self, ds, shown) -> list:
        """One dropdown per dim of `ds` that the explorer does not show and that has more than
        one value (e.g. ``ssm_init``, ``spt_share``): "mean" (averaged over, the default) or one
        of its values. Stored in ``self.widgets`` under the dim's name; returns them as a row."""
        from ._data import values
        self._extra = [d for d in ds.dims if d not in shown and ds.sizes[d] > 1]
        for d in self._extra:
            self.widgets[d] = W.Dropdown(options=["mean"] + values(ds, d), value="mean",
                                         description=d)
        return [self.widgets[d] for d in self._extra]

    def _extra_selection(self) -> tuple[dict, list]:
        """({dim: chosen value} for the extra dims set to a value, [extra dims averaged over])."""
        chosen = {d: self.widgets[d].value for d in self._extra if self.widgets[d].value != "mean"}
        return chosen, [d for d in self._extra if d not in chosen]

    def _finish(self, rows: list) -> None:
        """Lay out the control rows, draw the first state, and watch every control."""
        self.box = W.VBox([*(W.HBox(r, layout=W.Layout(flex_flow="row wrap")) for r in rows),
                           self.status, self.host.widget])
        for w in self.widgets.values():
            w.observe(self._on_change, names="value")
        self.update()

    def _on_change(self, change) -> None:
        try:
            self.update()
        except Exception as e:  # show it next to the controls; a kernel would swallow it
            self.status.value = f"<span style='color:#b00'>error: {type(e).__name__}: {e}</span>"
            raise

    def update(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        """Displayed as its widget layout (the last value of a notebook cell, or display(ex))."""
        return self.box._repr_mimebundle_(**kwargs)
