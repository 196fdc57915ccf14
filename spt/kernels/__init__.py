"""Fast paths for SSM kernel generation, each beside its plain-torch reference.

* :func:`vandermonde` / :func:`vandermonde_ref` - diagonal SSM kernels (S4D, DLR)
* :func:`cauchy` / :func:`cauchy_ref`           - resolvent sums behind the S4 DPLR kernel
* :func:`dplr_kernel` / :func:`dplr_kernel_ref` - the S4 kernel (Cauchy + Woodbury) vs naive powers
* :func:`fft_conv` / :func:`direct_conv_ref`    - causal / bidirectional long convolution
                                                  (backends "autograd", "manual")
* :func:`linear_scan` / :func:`linear_scan_ref`, :func:`selective_scan` / :func:`selective_scan_ref`
                                                - linear recurrences and Mamba's selective scan

Triton is optional: see :mod:`spt.kernels._triton` for the backends ("auto", "triton", "torch",
"ref") that every kernel function accepts.
"""
from ._triton import BACKENDS, HAS_TRITON, interpreting, resolve_backend
from .cauchy import cauchy, cauchy_ref
from .dplr import c_to_ctilde, ctilde_to_c, dplr_discrete, dplr_kernel, dplr_kernel_ref
from .fftconv import FFT_CONV_BACKENDS, direct_conv_ref, fast_length, fft_conv
from .scan import linear_scan, linear_scan_ref, selective_scan, selective_scan_ref
from .vandermonde import vandermonde, vandermonde_ref

__all__ = ["BACKENDS", "FFT_CONV_BACKENDS", "HAS_TRITON", "interpreting", "resolve_backend",
           "cauchy", "cauchy_ref", "c_to_ctilde", "ctilde_to_c", "dplr_discrete", "dplr_kernel",
           "dplr_kernel_ref", "direct_conv_ref", "fast_length", "fft_conv", "linear_scan",
           "linear_scan_ref", "selective_scan", "selective_scan_ref", "vandermonde",
           "vandermonde_ref"]
