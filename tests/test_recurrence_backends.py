"""The recurrences' paths (``backend=``, spt.kernels.library): "torch" and "ref" agree (outputs and
gradients, padded), "torch" is the default, a bad name and "library" off CUDA give clear errors;
the mixers' cores hold their path in a plain attribute that set_paths sets; and, on a GPU, each
library kernel against spt's form."""
import pytest
import torch
import torch.nn.functional as F

from spt.kernels import gated_delta_rule, gla, linear_scan, selective_scan, ssd
from spt.kernels.library import RECURRENCE_PATHS, fla_one_config
from spt.kernels.paths import set_paths
from spt.kernels.scan import LINEAR_SCAN_PATHS
from spt.mixer_config import GatedDeltaNetConfig, GLAConfig, LRUConfig, Mamba2Config, MambaConfig
from spt.models.mixers.stack import mixer_layer

BATCH = 2


def _valid(L):
    return torch.arange(L)[None] < torch.tensor([L, L // 2 + 1])[:, None]


# each maker: (r (*shape) -> random tensor, L, n and m two widths) -> (tensor args, keywords)
def _linear_scan(r, L, n, m):
    return (torch.sigmoid(r(BATCH, L, n)) * 0.9, r(BATCH, L, n)), {}


def _selective_scan(r, L, n, m):
    u, delta = r(BATCH, L, n), F.softplus(r(BATCH, L, n) - 1)
    A = -torch.rand(n, m, dtype=u.dtype) * 4 - 0.5
    return ((u, delta, A, r(BATCH, L, m), r(BATCH, L, m), r(n), r(BATCH, L, n)),
            {"valid": _valid(L)})


def _ssd(r, L, n, m):
    x, dt = r(BATCH, L, 2, n), F.softplus(r(BATCH, L, 2) - 1)
    A = -torch.rand(2, dtype=x.dtype) * 4 - 0.5
    return (x, dt, A, r(BATCH, L, m), r(BATCH, L, m), r(2)), {"valid": _valid(L), "chunk": 4}


def _gla(r, L, n, m):
    g = F.logsigmoid(r(BATCH, L, 2, n))
    return (r(BATCH, L, 2, n), r(BATCH, L, 2, n), r(BATCH, L, 2, m), g), {"valid": _valid(L),
                                                                          "chunk": 4}


def _gated_delta_rule(r, L, n, m):
    q, k = r(BATCH, L, 2, n), F.normalize(r(BATCH, L, 2, n), dim=-1)
    g, beta = -torch.rand(BATCH, L, 2, dtype=q.dtype), torch.rand(BATCH, L, 2, dtype=q.dtype)
    return (q, k, r(BATCH, L, 2, m), g, beta), {"valid": _valid(L), "chunk": 4}


CASES = {"linear_scan": (linear_scan, _linear_scan), "selective_scan": (selective_scan, _selective_scan),
         "ssd": (ssd, _ssd), "gla": (gla, _gla), "gated_delta_rule": (gated_delta_rule, _gated_delta_rule)}


def _inputs(make, seed, dtype=torch.float64, device="cpu", L=11, n=4, m=3):
    torch.manual_seed(seed)
    args, kw = make(lambda *s: torch.randn(*s, dtype=dtype), L, n, m)
    args = tuple(t.to(device).requires_grad_() for t in args)
    kw = {k: v.to(device) if torch.is_tensor(v) else v for k, v in kw.items()}
    return args, kw


def _run(fn, args, kw, backend):
    """(output, gradients of every input) for a fixed random weighting of the real positions'
    outputs."""
    y = fn(*args, **kw, backend=backend)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=y.dtype).to(y.device)
    if "valid" in kw:
        w = w * kw["valid"].reshape(*kw["valid"].shape, *(1,) * (y.dim() - 2))
    return y.detach(), torch.autograd.grad((y * w).sum(), args)


@pytest.mark.parametrize("name", CASES)
def test_torch_equals_ref_outputs_and_gradients(name):
    fn, make = CASES[name]
    args, kw = _inputs(make, seed=1)
    y1, g1 = _run(fn, args, kw, "torch")
    y2, g2 = _run(fn, args, kw, "ref")
    torch.testing.assert_close(y1, y2)
    for i, (a, b) in enumerate(zip(g1, g2)):
        torch.testing.assert_close(a, b, msg=f"{name}: gradient of input {i}")


@pytest.mark.parametrize("name", CASES)
def test_the_default_is_the_torch_path(name):
    fn, make = CASES[name]
    args, kw = _inputs(make, seed=2, dtype=torch.float32)
    y1, _ = _run(fn, args, kw, "torch")
    assert torch.equal(fn(*args, **kw), y1)


@pytest.mark.parametrize("name", CASES)
def test_a_bad_backend_name_lists_the_choices(name):
    fn, make = CASES[name]
    args, kw = _inputs(make, seed=3)
    with pytest.raises(ValueError, match=f"{name}: path must be one of") as err:
        fn(*args, **kw, backend="triton")
    choices = LINEAR_SCAN_PATHS if name == "linear_scan" else RECURRENCE_PATHS
    assert all(repr(c) in str(err.value) for c in choices)


@pytest.mark.parametrize("name", CASES)
def test_library_on_the_cpu_says_why_and_what_to_do(name):
    fn, make = CASES[name]
    args, kw = _inputs(make, seed=4)
    if name == "linear_scan":  # it has no library kernel: not one of its paths
        with pytest.raises(ValueError, match="linear_scan: path must be one of \\('torch', 'ref'\\)"):
            fn(*args, **kw, backend="library")
        return
    package = "mamba-ssm" if name in ("selective_scan", "ssd") else "fla-core"
    with pytest.raises(ValueError, match=f"{name}: the path 'library' runs .*pip install "
                                         f"{package}.*CUDA kernel.*inputs are on cpu.*path 'torch'"):
        fn(*args, **kw, backend="library")


CONFIGS = {"mamba": MambaConfig(d_model=8, causal=False, d_state=4),
           "mamba2": Mamba2Config(d_model=8, causal=False, d_state=4, head_dim=4),
           "gated_deltanet": GatedDeltaNetConfig(d_model=8, causal=False, n_heads=2, head_dim=0),
           "gla": GLAConfig(d_model=8, causal=False, n_heads=2),
           "lru": LRUConfig(d_model=8, causal=False, d_state=4)}
MIXERS = {name: (lambda cfg=cfg: mixer_layer(cfg)) for name, cfg in CONFIGS.items()}


@pytest.mark.parametrize("name", MIXERS)
def test_the_mixers_cores_hold_their_path_in_a_plain_attribute_that_set_paths_sets(name):
    mixer = MIXERS[name]()
    before = mixer.state_dict().keys()
    assert [c.path for c in mixer.cores] == ["torch", "torch"]
    kind = mixer.cores[0].path_kind
    assert set_paths(mixer, "ref") == {"cores.0": "ref", "cores.1": "ref"}
    assert [c.path for c in mixer.cores] == ["ref", "ref"]
    assert set_paths(mixer, {kind: "torch"}) == {"cores.0": "torch", "cores.1": "torch"}
    assert mixer.state_dict().keys() == before and not any("path" in k for k in before)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["selective_scan", "ssd", "gla", "gated_delta_rule"])
def test_library_kernel_equals_spt_form_on_cuda(name):
    """The library kernel (backend="library") against spt's form (backend="torch") on the same
    CUDA inputs in float32 (widths 16, the kernels' smallest blocks), outputs at real positions
    and every input's gradient, within a
    relative error of 5e-3 (the kernels may multiply in TF32)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    fn, make = CASES[name]
    module = {"selective_scan": "mamba_ssm.ops.selective_scan_interface",
              "ssd": "mamba_ssm.ops.triton.ssd_combined", "gla": "fla.ops.gla",
              "gated_delta_rule": "fla.ops.gated_delta_rule"}[name]
    pytest.importorskip(module)
    if module.startswith("fla"):
        fla_one_config()  # a check of results needs one config per kernel, not autotuning
    args, kw = _inputs(make, seed=5, dtype=torch.float32, device="cuda", L=200, n=16, m=16)
    y1, g1 = _run(fn, args, kw, "library")
    y2, g2 = _run(fn, args, kw, "torch")
    real = kw["valid"]
    _relative_close(y1[real], y2[real], f"{name} output")
    for i, (a, b) in enumerate(zip(g1, g2)):
        _relative_close(a, b, f"{name}: gradient of input {i}")


def _relative_close(a, b, what, tol=5e-3):
    err = ((a - b).norm() / b.norm().clamp(min=1e-12)).item()
    assert err < tol, f"{what}: relative error {err:.2e} >= {tol}"
