"""Fast paths for SSM kernels, the FFT convolution, attention and the mixers' recurrences, each
beside its plain-torch reference. Which path a module runs is one vocabulary, set by one function
(:mod:`spt.kernels.paths`: ``set_paths(model, ...)``) and measured on the device by
``TrainConfig.paths="auto"`` (:mod:`spt.train.paths`).

SSM kernels (paths "torch", "triton", "ref": see :mod:`spt.kernels._triton`):

* :func:`vandermonde` / :func:`vandermonde_ref` - diagonal SSM kernels (S4D, DLR; "gemm" for DLR)
* :func:`cauchy` / :func:`cauchy_ref`           - resolvent sums behind the S4 DPLR kernel
* :func:`dplr_kernel` / :func:`dplr_kernel_ref` - the S4 kernel (Cauchy + Woodbury) vs naive powers
* :func:`fft_conv` / :func:`direct_conv_ref`    - causal / bidirectional long convolution
                                                  (paths "torch", "manual")

Attention (paths "torch", "library", "flex", "dense", "ref": see :mod:`spt.kernels.attention`):

* :func:`full_attention`, :func:`local_attention` / :func:`attention_ref`

Recurrences (paths "torch", "library", "ref": see :mod:`spt.kernels.library`; "library" is the
library kernel on CUDA, "ref" the ``*_ref`` loop over time):

* :func:`linear_scan` / :func:`linear_scan_ref`           - h_t = a_t h_{t-1} + b_t (LRU); no
                                                            library kernel ("torch", "ref")
* :func:`selective_scan` / :func:`selective_scan_ref`     - Mamba's selective SSM (mamba-ssm's
                                                            ``selective_scan_fn``)
* :func:`ssd` / :func:`ssd_ref`                           - Mamba-2's SSD (mamba-ssm's
                                                            ``mamba_chunk_scan_combined``)
* :func:`gla` / :func:`gla_ref`                           - gated linear attention (fla's
                                                            ``chunk_gla``)
* :func:`gated_delta_rule` / :func:`gated_delta_rule_ref` - Gated DeltaNet's rule (fla's
                                                            ``chunk_gated_delta_rule``)
"""
from ._triton import HAS_TRITON, KERNEL_PATHS, interpreting, resolve_backend
from .attention import ATTENTION_PATHS, attention_ref, full_attention, local_attention
from .cauchy import cauchy, cauchy_ref
from .delta_rule import gated_delta_rule, gated_delta_rule_ref
from .dplr import c_to_ctilde, ctilde_to_c, dplr_discrete, dplr_kernel, dplr_kernel_ref
from .fftconv import FFT_CONV_PATHS, direct_conv_ref, fast_length, fft_conv
from .gla import gla, gla_ref
from .library import RECURRENCE_PATHS
from .paths import PATHS, set_paths
from .scan import linear_scan, linear_scan_ref, selective_scan, selective_scan_ref
from .ssd import ssd, ssd_ref
from .vandermonde import vandermonde, vandermonde_ref

__all__ = ["ATTENTION_PATHS", "FFT_CONV_PATHS", "HAS_TRITON", "KERNEL_PATHS", "PATHS",
           "RECURRENCE_PATHS", "interpreting", "resolve_backend", "set_paths", "attention_ref",
           "cauchy", "cauchy_ref", "c_to_ctilde", "ctilde_to_c", "dplr_discrete", "dplr_kernel",
           "dplr_kernel_ref", "direct_conv_ref", "fast_length", "fft_conv", "full_attention",
           "gated_delta_rule", "gated_delta_rule_ref", "gla", "gla_ref", "linear_scan",
           "linear_scan_ref", "local_attention", "selective_scan", "selective_scan_ref", "ssd",
           "ssd_ref", "vandermonde", "vandermonde_ref"]
