"""Figures (matplotlib) and interactive explorers (ipywidgets + ipympl) for spt results.

Figures return a matplotlib Figure: fig1_model_init_bars, fig2_initializations, fig3_data_scales,
fig4_kernel_decay, fig5_compute_tied, fig5_training_curves, fig_receptive_field (the effective
receptive field before / after SPT, kernel magnitude overlaid); plot_gain_bars / plot_training_curves
draw one quickstart result (spt.studies.quickstart.run). Explorers: explore_kernels (``erf=`` adds the
receptive field of each layer), explore_data_scales, explore_training (each returns an object with
.widgets, .fig, .lines; display it in a notebook).
"""
from .comparison import plot_gain_bars, plot_training_curves
from .explore_kernels import KernelExplorer, explore_kernels
from .explore_results import DataScalesExplorer, TrainingExplorer, explore_data_scales, explore_training
from .figures import (
                      fig1_model_init_bars,
                      fig2_initializations,
                      fig3_data_scales,
                      fig5_compute_tied,
                      fig5_training_curves,
                      gain,
)
from .kernel_plots import fig4_kernel_decay, kernel_dataset
from .range_plots import fig_range_curve
from .receptive_field_plots import fig_receptive_field

__all__ = ["plot_gain_bars", "plot_training_curves", "fig1_model_init_bars", "fig2_initializations",
           "fig3_data_scales", "fig4_kernel_decay", "fig5_compute_tied", "fig5_training_curves",
           "gain", "kernel_dataset", "fig_receptive_field", "fig_range_curve", "explore_kernels",
           "explore_data_scales", "explore_training",
           "KernelExplorer", "DataScalesExplorer", "TrainingExplorer"]
