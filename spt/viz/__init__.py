"""Figures (matplotlib) for spt result Datasets."""
from .comparison import plot_gain_bars, plot_training_curves

__all__ = ["plot_gain_bars", "plot_training_curves"]
