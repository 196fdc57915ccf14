"""Analyses of trained models: SSM kernel decay (paper section 3.6)."""
from .kernels import find_ssm_encoder, kernel_decay, kernel_decay_baseline, kernel_decay_comparison

__all__ = ["find_ssm_encoder", "kernel_decay", "kernel_decay_baseline", "kernel_decay_comparison"]
