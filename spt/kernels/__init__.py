"""Fast paths for SSM kernel generation and for the mixers' recurrences, each beside its
plain-torch reference.

SSM kernels (backends "auto", "triton", "torch", "ref": see :mod:`spt.kernels._triton`):

* :func:`vandermonde` / :func:`vandermonde_ref` - diagonal SSM kernels (S4D, DLR)
* :func:`cauchy` / :func:`cauchy_ref`           - resolvent sums behind the S4 DPLR kernel
* :func:`dplr_kernel` / :func:`dplr_kernel_ref` - the S4 kernel (Cauchy + Woodbury) vs naive powers
* :func:`fft_conv` / :func:`direct_conv_ref`    - causal / bidirectional long convolution
                                                  (backends "autograd", "manual")

Recurrences (backends "auto", "library", "torch", "ref": see :mod:`spt.kernels.library`; "auto"
is the library kernel on CUDA when its package imports, else spt's torch form; "ref" the
``*_ref`` loop over time):

* :func:`linear_scan` / :func:`linear_scan_ref`           - h_t = a_t h_{t-1} + b_t (LRU); no
                                                            library kernel ("auto", "torch", "ref")
* :func:`selective_scan` / :func:`selective_scan_ref`     - Mamba's selective SSM (mamba-ssm's
                                                            ``selective_scan_fn``)
* :func:`ssd` / :func:`ssd_ref`                           - Mamba-2's SSD (mamba-ssm's
                                                            ``mamba_chunk_scan_combined``)
* :func:`gla` / :func:`gla_ref`                           - gated linear attention (fla's
                                                            ``chunk_gla``)
* :func:`gated_delta_rule` / :func:`gated_delta_rule_ref` - Gated DeltaNet's rule (fla's
                                                            ``chunk_gated_delta_rule``)
"""
from ._triton import BACKENDS, HAS_TRITON, interpreting, resolve_backend
from .cauchy import cauchy, cauchy_ref
from .delta_rule import gated_delta_rule, gated_delta_rule_ref
from .dplr import c_to_ctilde, ctilde_to_c, dplr_discrete, dplr_kernel, dplr_kernel_ref
from .fftconv import FFT_CONV_BACKENDS, direct_conv_ref, fast_length, fft_conv
from .gla import gla, gla_ref
from .library import RECURRENCE_BACKENDS
from .scan import linear_scan, linear_scan_ref, selective_scan, selective_scan_ref
from .ssd import ssd, ssd_ref
from .vandermonde import vandermonde, vandermonde_ref

__all__ = ["BACKENDS", "FFT_CONV_BACKENDS", "HAS_TRITON", "RECURRENCE_BACKENDS", "interpreting",
           "resolve_backend", "cauchy", "cauchy_ref", "c_to_ctilde", "ctilde_to_c",
           "dplr_discrete", "dplr_kernel", "dplr_kernel_ref", "direct_conv_ref", "fast_length",
           "fft_conv", "gated_delta_rule", "gated_delta_rule_ref", "gla", "gla_ref",
           "linear_scan", "linear_scan_ref", "selective_scan", "selective_scan_ref", "ssd",
           "ssd_ref", "vandermonde", "vandermonde_ref"]
