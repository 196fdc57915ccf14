"""S4 / S4D / DLR layers: step mode, directions, padding, initialisations, optimiser hints, config."""
import ast
import math
from pathlib import Path

import pytest
import torch

from spt.config import TrainConfig
from spt.kernels import HAS_TRITON, dplr_kernel_ref, interpreting, set_paths
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models import hippo
from spt.models.model import build_layers
from spt.models.ssm import SSMEncoder
from spt.models.ssm_kernels import S4Kernel
from spt.paper import SSM_ROWS, ssm_row
from spt.ssm_config import SSMConfig
from spt.train.optim import param_groups

KINDS = [("s4", "legs"), ("s4", "random"), ("s4d", "legs"), ("s4d", "lin"), ("s4d", "inv"),
         ("s4d", "random"), ("dlr", "omega"), ("dlr", "random")]


def _cfg(kind, init=None, **kw):
    base = dict(kind=kind, init=init, d_model=6, n_layers=2, d_state=8, max_len=32)
    base.update(kw)
    return SSMConfig(**base)


# the SSM-only random redraw keeps dt log-uniform, so its kernels are long and worth stepping too
RANDOM_SSM = [("s4", "random_ssm"), ("s4d", "random_ssm"), ("dlr", "random_ssm")]


@pytest.mark.parametrize("kind,init", KINDS + RANDOM_SSM)
@pytest.mark.parametrize("prenorm", [True, False])
def test_step_mode_equals_convolution(kind, init, prenorm):
    torch.manual_seed(0)
    enc = SSMEncoder(_cfg(kind, init, causal=True, prenorm=prenorm)).double().eval()
    x = torch.randn(2, 20, 6, dtype=torch.float64)
    y = enc(x)
    enc.setup_step()
    states, ys = enc.default_state(2), []
    for t in range(20):
        yt, states = enc.step(x[:, t], states)
        ys.append(yt)
    assert torch.allclose(torch.stack(ys, 1), y, atol=1e-10)


def test_step_mode_float32_and_refusals():
    torch.manual_seed(1)
    enc = SSMEncoder(_cfg("s4", causal=True)).eval()
    x = torch.randn(1, 12, 6)
    enc.setup_step()
    states, ys = enc.default_state(1), []
    for t in range(12):
        yt, states = enc.step(x[:, t], states)
        ys.append(yt)
    assert torch.allclose(torch.stack(ys, 1), enc(x), atol=1e-4)
    with pytest.raises(RuntimeError, match="causal"):
        SSMEncoder(_cfg("s4d", causal=False)).setup_step()
    with pytest.raises(RuntimeError, match="setup_step"):
        SSMEncoder(_cfg("dlr", causal=True)).default_state(1)


def _jacobian_blocks(enc, L=10):
    """dep[t, s] = sum over channels of |d (w . y[t]) / d x[s]| for a random w: (L, L).
    (Not y[t].sum(): a LayerNorm output sums to a constant.)"""
    x = torch.randn(1, L, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64)
    y = enc(x)
    rows = [torch.autograd.grad(y[0, t] @ w, x, retain_graph=True)[0][0].abs().sum(-1)
            for t in range(L)]
    return torch.stack(rows)


@pytest.mark.parametrize("kind,init", KINDS[::2])
def test_causal_never_sees_the_future_and_bidirectional_sees_both(kind, init):
    torch.manual_seed(2)
    causal = SSMEncoder(_cfg(kind, init, causal=True)).double().eval()
    dep = _jacobian_blocks(causal)
    # t < s: no dependence, up to the FFT's rounding (~1e-16 of the real entries in float64)
    assert torch.triu(dep, diagonal=1).max() < 1e-12 * dep.max()
    lower = torch.ones_like(dep, dtype=torch.bool).tril()
    assert torch.all(dep[lower] > 1e-6 * dep.max())
    bidir = SSMEncoder(_cfg(kind, init, causal=False)).double().eval()
    dep = _jacobian_blocks(bidir)
    assert torch.all(dep > 1e-6 * dep.max())                     # every output sees every input


@pytest.mark.parametrize("kind", ["s4", "s4d", "dlr"])
@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_padding_never_leaks_into_real_positions(kind, norm):
    torch.manual_seed(3)
    enc = SSMEncoder(_cfg(kind, causal=False, norm=norm)).double().train()
    x = torch.randn(2, 12, 6, dtype=torch.float64)
    valid = torch.ones(2, 12, dtype=torch.bool)
    valid[1, 7:] = False
    x2 = x.clone()
    x2[1, 7:] = 100 * torch.randn(5, 6, dtype=torch.float64)    # garbage in the padding
    y1, y2 = enc(x, valid), enc(x2, valid)
    assert torch.allclose(y1[valid], y2[valid], atol=1e-10)
    short = enc.eval()(x[1:, :7])                                # the same sequence, unpadded
    assert torch.allclose(enc(x2, valid)[1, :7], short[0], atol=1e-10)


def test_s4_module_kernel_equals_naive_from_its_discrete_matrices():
    torch.manual_seed(4)
    kern = S4Kernel(_cfg("s4", causal=True, max_len=24), n_dir=1).double()
    Ab, Bb, C, scale = kern.discrete()
    x, naive = Bb, []
    for _ in range(24):
        naive.append(scale * (C[0] * x).sum(-1).real)
        x = torch.einsum("hij,hj->hi", Ab, x)
    naive = torch.stack(naive, -1)
    K = kern(24)[0]
    assert torch.allclose(K, naive, atol=1e-10 * naive.abs().max().item())
    assert torch.allclose(kern(10)[0], naive[:, :10], atol=1e-10)   # shorter L: a prefix
    with pytest.raises(ValueError, match="max_len"):
        kern(25)


def test_s4_initial_kernel_is_hippo_legs_with_random_c():
    """At init the S4 module's kernel is C^T Ā^k B̄ for the HiPPO-LegS DPLR matrices."""
    torch.manual_seed(5)
    kern = S4Kernel(_cfg("s4", causal=True, max_len=16), n_dir=1).double()
    lam, P, B, _, dt = kern.params()
    ref_lam, ref_P, ref_B = hippo.legs_dplr(8)
    assert torch.allclose(lam[0], ref_lam) and torch.allclose(P[0], ref_P.to(P.dtype), atol=1e-6)
    _, _, C, _ = kern.discrete()
    naive = dplr_kernel_ref(lam, P, B, C[..., :4], dt, 16)
    assert torch.allclose(kern(16), naive, atol=1e-6)


def test_legs_dplr_is_unitarily_equivalent_to_hippo_legs():
    N = 10
    A, B = hippo.legs_matrices(N)
    lam, P, Bt = hippo.legs_dplr(N, b_clip=None)
    lam_f, p = torch.cat([lam, lam.conj()]), torch.cat([P, P.conj()])
    A2 = torch.diag(lam_f) - p[:, None] * p.conj()[None, :]
    eig = lambda M: torch.sort(torch.linalg.eigvals(M).real).values   # noqa: E731
    assert torch.allclose(eig(A.to(torch.complex128)), eig(A2), atol=1e-8)
    assert torch.allclose(eig(A.to(torch.complex128)), -torch.arange(N, 0, -1).double(), atol=1e-8)
    for s in (0.3 + 0.7j, 2.0 - 1.0j):  # same resolvent norm ||(sI - A)^-1 B|| (unitary change)
        I = torch.eye(N, dtype=torch.complex128)
        r1 = torch.linalg.solve(s * I - A.to(torch.complex128), B.to(torch.complex128))
        r2 = torch.linalg.solve(s * I - A2, torch.cat([Bt, Bt.conj()]))
        assert abs(r1.norm() - r2.norm()) < 1e-8
    assert torch.all(lam.real == -0.5) and torch.all(lam.imag < 0)


def test_diagonal_and_dlr_initialisations():
    assert torch.allclose(hippo.s4d_lin(3), torch.tensor([-0.5, -0.5 - 1j * math.pi, -0.5 - 2j * math.pi],
                                                         dtype=torch.complex128))
    inv = hippo.s4d_inv(4)  # N = 8: imag = -(8/pi) (8/(2n+1) - 1)
    assert torch.allclose(inv.imag, -(8 / math.pi) * (8 / (2 * torch.arange(4.).double() + 1) - 1))
    torch.manual_seed(0)
    om = hippo.dlr_omega(16, 1e-4, 1e-1)
    assert torch.allclose(om.imag, 2 * math.pi * torch.arange(16).double() / 16)
    assert torch.all((-2 * om.real >= 1e-4 - 1e-12) & (-2 * om.real <= 0.1 + 1e-12))


@pytest.mark.parametrize("kind", ["s4", "s4d", "dlr"])
def test_random_init_draws_state_space_parameters_from_small_normal(kind):
    torch.manual_seed(6)
    enc = SSMEncoder(SSMConfig(kind=kind, init="random", d_model=64, d_state=64, n_layers=1))
    kern = enc.blocks[0].kernel
    names = {"s4": ["log_neg_re", "im", "P", "B", "C"], "s4d": ["log_neg_re", "im", "B", "C"],
             "dlr": ["sqrt_neg_re", "im", "C"]}[kind]
    for name in names:
        std = getattr(kern, name).detach().std().item()
        assert 0.08 < std < 0.12, (name, std)
    K = enc.kernels(64)[0]
    assert torch.isfinite(K).all()


def test_optimiser_hints_give_ssm_parameters_their_lr_and_no_weight_decay():
    for kind, ssm_names in (("s4", {"log_dt", "log_neg_re", "im", "P", "B"}),
                            ("s4d", {"log_dt", "log_neg_re", "im", "B"}),
                            ("dlr", {"sqrt_neg_re", "im", "C"})):
        enc = SSMEncoder(_cfg(kind, lr=7e-4))
        groups = param_groups(enc, TrainConfig(lr=1e-2, weight_decay=0.1))
        special = [g for g in groups if g["lr"] == 7e-4]
        assert len(special) == 1 and special[0]["weight_decay"] == 0.0
        assert {n.split(".")[-1] for n in special[0]["names"]} == ssm_names
        other = {n for g in groups if g["lr"] == 1e-2 for n in g["names"]}
        assert any(n.endswith("out.0.weight") or n.endswith("out.weight") for n in other)


@pytest.mark.skipif(not HAS_TRITON or not interpreting(),
                    reason="triton is not installed, or TRITON_INTERPRET is off (a GPU machine): "
                           "the CPU tensors reach the kernels through TRITON_INTERPRET=1")
@pytest.mark.parametrize("kind", ["s4", "s4d", "dlr"])
def test_layer_with_triton_backend_matches_reference_backend(kind):
    torch.manual_seed(7)
    enc = SSMEncoder(_cfg(kind, d_model=3, n_layers=1, max_len=16)).eval()
    x = torch.randn(1, 16, 3)
    outs = []
    for backend in ("ref", "triton", "torch"):
        enc.zero_grad()
        set_paths(enc, {f"{kind}_kernel": backend})
        y = enc(x)
        (y * torch.linspace(-1, 1, 16)[:, None]).sum().backward()
        outs.append((y.detach(), [p.grad.clone() for p in enc.parameters() if p.grad is not None]))
    (y0, g0) = outs[0]
    for y, g in outs[1:]:
        assert torch.allclose(y, y0, atol=1e-4)
        for a, b in zip(g, g0):
            assert torch.allclose(a, b, atol=1e-4 * max(1.0, b.abs().max().item()))


def test_config_validation_defaults_and_checkpoint_round_trip():
    assert SSMConfig(kind="s4").init == "legs" and SSMConfig(kind="s4").lr == 1e-3
    dlr = SSMConfig(kind="dlr")
    assert dlr.init == "omega" and dlr.lr == 1e-4 and dlr.dt_min == 1e-4
    assert model_config_from_dict(model_config_to_dict(dlr)) == dlr
    with pytest.raises(ValueError, match="init"):
        SSMConfig(kind="dlr", init="legs")
    with pytest.raises(ValueError, match="even"):
        SSMConfig(kind="s4", d_state=7)
    with pytest.raises(ValueError, match="kind"):
        SSMConfig(kind="mamba")
    assert isinstance(build_layers(dlr), SSMEncoder)


def _spt_imports(path: Path) -> set[str]:
    """The spt modules a source file imports, at any depth (function-level imports too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative to the spt package (these modules sit at its top)
                base = "spt" + ("." + node.module if node.module else "")
                out |= {base} if node.module else {f"spt.{a.name}" for a in node.names}
            elif node.module and node.module.startswith("spt"):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("spt")}
    return out


def test_config_modules_depend_one_way():
    """spt.config_base <- the model config modules <- spt.model_config: the base imports no spt
    module, each model config module imports the base and never the registry, the registry
    imports them all (plain imports), and a checkpoint's SSM config round-trips through it."""
    import spt.config
    src = Path(spt.config.__file__).parent
    configs = ("config.py", "ssm_config.py", "sgconv_config.py", "free_conv_config.py",
               "mixer_config.py", "layer_config.py")
    assert not _spt_imports(src / "config_base.py")
    for name in configs:
        imports = _spt_imports(src / name)
        assert "spt.config_base" in imports and "spt.model_config" not in imports, (name, imports)
        assert not imports & {"spt.ssm_config", "spt.mixer_config"}, (name, imports)
    registry = _spt_imports(src / "model_config.py")
    assert {f"spt.{n[:-3]}" for n in configs} <= registry, registry
    assert not hasattr(spt.config, "__getattr__")
    c = SSMConfig(kind="s4d")
    assert model_config_from_dict(model_config_to_dict(c)) == c
    with pytest.raises(AttributeError, match="spt.config.*no_such"):
        spt.config.no_such


def test_presets_follow_table5():
    p = ssm_row("listops", "s4")
    assert (p.finetune.lr, p.finetune.batch_size, p.pretrain.lr, p.pretrain.batch_size) == \
        (1e-3, 16, 1e-3, 128)
    assert p.model.kind == "s4" and p.model.d_state == 64 and p.objective.mask_ratio == 0.1
    d = ssm_row("pathx", "dlr_random")
    assert d.model.kind == "dlr" and d.model.init == "random" and d.model.d_state == 1024
    assert d.model.pooling == "max" and d.model.norm == "layer" and d.scratch.lr == 5e-4
    assert len(SSM_ROWS) == 6 + 3 * 4
    with pytest.raises(KeyError, match="rows are"):
        ssm_row("retrieval", "dlr")


# ---------------------------------------------------------------- the final S4's layer options
def test_n_ssm_shares_a_and_b_across_channels_as_the_s4_code_does():
    from spt.models.ssm_kernels import S4Kernel
    torch.manual_seed(0)
    cfg = SSMConfig(kind="s4", d_model=6, d_state=8, n_ssm=2, max_len=16, init="random_ssm")
    k = S4Kernel(cfg, 2)
    assert k.log_neg_re.shape == k.im.shape == (2, 4) and k.P.shape == k.B.shape == (2, 4, 2)
    assert k.C.shape == (2, 6, 4, 2) and k.log_dt.shape == (6,)
    lam, P, B, C, dt = k.params()
    for h in range(6):  # channel h reads copy h mod n_ssm ('t n -> (v t) n')
        assert torch.equal(lam[h], lam[h % 2]) and torch.equal(P[h], P[h % 2])
        assert torch.equal(B[h], B[h % 2])
    assert not torch.equal(lam[0], lam[1])
    K = k(16)
    assert K.shape == (2, 6, 16) and not torch.allclose(K[:, 0], K[:, 2])  # C, dt per channel
    full = sum(p.numel() for p in S4Kernel(SSMConfig(kind="s4", d_model=6, d_state=8,
                                                     max_len=16), 2).parameters())
    assert sum(p.numel() for p in k.parameters()) == full - 4 * (4 + 4 + 8 + 8)


def test_tied_dropout_keeps_one_mask_along_the_sequence():
    from spt.models.ssm import TiedDropout
    torch.manual_seed(0)
    drop = TiedDropout(0.5).train()
    y = drop(torch.ones(3, 50, 8))
    assert torch.equal(y, y[:, :1].expand_as(y))        # the same mask at every position
    assert set(y.unique().tolist()) == {0.0, 2.0}
    assert torch.equal(drop.eval()(torch.ones(3, 50, 8)), torch.ones(3, 50, 8))
    block = SSMEncoder(SSMConfig(kind="s4", d_model=8, n_layers=1, d_state=4, max_len=16,
                                 dropout=0.2, tie_dropout=True)).blocks[0]
    assert isinstance(block.drop, TiedDropout)


def test_dt_at_the_runs_lr_without_weight_decay():
    from spt.config import TrainConfig
    from spt.train.optim import param_groups
    enc = SSMEncoder(SSMConfig(kind="s4", d_model=8, n_layers=1, d_state=4, max_len=16,
                               lr=1e-3, dt_lr="run"))
    groups = {n: (g["lr"], g["weight_decay"]) for g in
              param_groups(enc, TrainConfig(lr=0.01, weight_decay=0.05, wd_groups="all"))
              for n in g["names"]}
    assert groups["blocks.0.kernel.log_dt"] == (0.01, 0.0)
    assert groups["blocks.0.kernel.P"] == (1e-3, 0.0)
    assert groups["blocks.0.kernel.C"] == (0.01, 0.05)
    with pytest.raises(ValueError, match="n_ssm=3 must divide d_model=8"):
        SSMConfig(kind="s4", d_model=8, n_ssm=3)


def test_configs_stored_before_the_final_s4_options_read_back_the_same():
    # a config at the options' defaults is stored without them, as before they existed, so result
    # files, last.pt and hub folders written earlier still match the configs that made them
    cfg = SSMConfig(kind="s4", d_model=8, n_layers=1, d_state=4, max_len=16)
    d = model_config_to_dict(cfg)
    assert not {"dt_lr", "n_ssm", "tie_dropout"} & set(d)
    assert model_config_from_dict(d) == cfg
    final = SSMConfig(kind="s4", d_model=8, n_layers=1, d_state=4, max_len=16, dt_lr="run",
                      n_ssm=2, tie_dropout=True, dropout=0.1)
    d = model_config_to_dict(final)
    assert (d["dt_lr"], d["n_ssm"], d["tie_dropout"]) == ("run", 2, True)
    assert model_config_from_dict(d) == final


@pytest.mark.parametrize("kind", ["s4", "s4d", "dlr"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_manual_conv_backend_matches_the_default_outputs_and_gradients(kind, causal, dtype):
    """The FFT convolution's path "manual" (skip term folded into the kernel, hand-written FFT
    backward) against the reference on a padded batch; L = 13 gives the manual FFT length 27,
    not 26."""
    torch.manual_seed(11)
    enc = SSMEncoder(_cfg(kind, d_model=4, n_layers=2, max_len=13, causal=causal)).to(dtype)
    x = torch.randn(2, 13, 4, dtype=dtype)
    valid = torch.ones(2, 13, dtype=torch.bool)
    valid[1, 9:] = False
    w = torch.randn(2, 13, 4, dtype=dtype)
    outs = {}
    for backend in ("torch", "manual"):
        enc.zero_grad()
        xi = x.clone().requires_grad_()
        assert set(set_paths(enc, {"fft_conv": backend}).values()) >= {backend}
        y = enc(xi, valid)
        (y * w).sum().backward()
        outs[backend] = [y.detach(), xi.grad] + [p.grad.clone() for p in enc.parameters()]
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for a, b in zip(outs["manual"], outs["torch"]):
        assert (a - b).abs().max() <= tol * max(1.0, b.abs().max().item())
    with pytest.raises(ValueError, match="path must be one of"):
        set_paths(enc, {"fft_conv": "fast"})


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dlr_gemm_kernel_backend_matches_the_default(dtype):
    torch.manual_seed(12)
    enc = SSMEncoder(_cfg("dlr", d_model=4, n_layers=1, d_state=16, max_len=40)).to(dtype)
    x, w = torch.randn(2, 40, 4, dtype=dtype), torch.randn(2, 40, 4, dtype=dtype)
    outs = {}
    for backend in ("torch", "gemm"):
        enc.zero_grad()
        set_paths(enc, {"dlr_kernel": backend})
        y = enc(x)
        (y * w).sum().backward()
        outs[backend] = [y.detach()] + [p.grad.clone() for p in enc.parameters()]
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for a, b in zip(outs["gemm"], outs["torch"]):
        assert (a - b).abs().max() <= tol * max(1.0, b.abs().max().item())
    with pytest.raises(ValueError, match="path must be one of"):  # an S4D kernel has no gemm
        set_paths(SSMEncoder(_cfg("s4d", d_model=4, n_layers=1)), {"s4d_kernel": "gemm"})
