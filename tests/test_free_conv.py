"""The unrestricted long convolution (FreeConvConfig): its free kernel, the block against a direct
O(L^2) convolution, padding, gradients, reach, config round trips and two training steps."""
import dataclasses
import json

import pytest
import torch

from spt.analysis.kernel_decay import baseline_encoder, kernel_decay_comparison
from spt.config import ObjectiveConfig, TrainConfig
from spt.data import digits_task
from spt.data.task import TaskSpec
from spt.free_conv_config import FreeConvConfig
from spt.kernels.fftconv import direct_conv_ref
from spt.model_config import MODEL_CONFIG_TYPES, model_config_from_dict, model_config_to_dict
from spt.models.free_conv import FreeConvBlock, FreeConvEncoder, FreeConvKernel
from spt.models.model import SequenceModel, build_layers, classifier_model, pretraining_model
from spt.models.ssm import cap_reach
from spt.train import finetune, pretrain
from spt.train.checkpoint import load_checkpoint
from spt.train.optim import param_groups


def tiny(**kw) -> FreeConvConfig:
    base = dict(d_model=3, n_layers=2, max_len=16, dropout=0.0)
    return FreeConvConfig(**{**base, **kw})


# ------------------------------------------------------------------ the kernel

@pytest.mark.parametrize("std", [1e-5, 0.3])
def test_kernel_is_one_weight_per_lag_drawn_with_the_init_std(std):
    torch.manual_seed(0)
    cfg = FreeConvConfig(d_model=16, n_layers=1, max_len=256, kernel_init_std=std)
    kern = FreeConvKernel(cfg, 2)
    w = kern.weight.detach().double()
    assert w.shape == (2, 16, 256)
    n = w.numel()
    # sample std of n = 8192 normals is within 5% of sigma with overwhelming probability (its
    # relative standard error is 1 / sqrt(2n) = 0.8%); 10x off or N(0, 1) fails
    assert abs(w.std().item() / std - 1) < 0.05
    assert abs(w.mean().item()) < 5 * std / n ** 0.5
    torch.testing.assert_close(kern(256), kern.weight)
    torch.testing.assert_close(kern(10), kern.weight[..., :10])  # shorter batches: a prefix
    assert kern.weight._optim == {"lr": cfg.lr, "weight_decay": 0.0}
    with pytest.raises(ValueError, match="max_len=256"):
        kern(257)


def test_kernel_gets_its_own_lr_and_no_weight_decay():
    enc = FreeConvEncoder(tiny(lr=2e-3))
    groups = param_groups(enc, TrainConfig(lr=1e-2, weight_decay=0.1))
    (g,) = [g for g in groups if "blocks.0.kernel.weight" in g["names"]]
    assert (g["lr"], g["weight_decay"]) == (2e-3, 0.0)
    assert sorted(g["names"]) == ["blocks.0.kernel.weight", "blocks.1.kernel.weight"]


# ------------------------------------------------------------------ the block

def reference_block(block: FreeConvBlock, x: torch.Tensor, valid) -> torch.Tensor:
    """The pre-norm block from its definition: x + Out(GELU(K * z + D z)) with z = LayerNorm(x)
    zeroed at padded positions and K * z the direct O(L^2) sum."""
    z = block.norm(x)
    if valid is not None:
        z = z * valid[..., None].to(z.dtype)
    K = block.kernel(x.shape[1])
    y = direct_conv_ref(z, K) + block.D * z
    return x + block.out(torch.nn.functional.gelu(y))


@pytest.mark.parametrize("causal", [True, False])
def test_block_equals_the_direct_convolution_and_padding_does_not_leak(causal):
    torch.manual_seed(1)
    # a kernel of unit scale, so the convolution, not the D skip, dominates the output
    block = FreeConvBlock(tiny(causal=causal, kernel_init_std=1.0)).double().eval()
    assert block.kernel(16).shape == (1 if causal else 2, 3, 16)
    L, lengths = 11, [11, 7, 4]
    x = torch.randn(3, L, 3, dtype=torch.float64)
    valid = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]   # right padding
    with torch.no_grad():
        y = block(x, valid)
        want = reference_block(block, x, valid)
        torch.testing.assert_close(y, want, rtol=1e-10, atol=1e-10)
        # each padded row's real positions are what the row alone, unpadded, gives
        for b, n in enumerate(lengths):
            alone = block(x[b:b + 1, :n])
            torch.testing.assert_close(y[b, :n], alone[0], rtol=1e-10, atol=1e-10)
        # the convolution matters: without it the output is different
        no_conv = dataclasses.replace(tiny(causal=causal, kernel_init_std=0.0))
        zero = FreeConvBlock(no_conv).double().eval()
        zero.load_state_dict({**block.state_dict(),
                              "kernel.weight": torch.zeros_like(block.kernel.weight)})
        assert (zero(x, valid) - y)[valid].abs().max() > 1e-2


@pytest.mark.parametrize("causal", [True, False])
def test_gradients_reach_every_kernel_weight(causal):
    torch.manual_seed(2)
    L = 16
    enc = FreeConvEncoder(tiny(causal=causal, n_layers=1, max_len=L)).double()
    x = torch.randn(2, L, 3, dtype=torch.float64)
    y = enc(x)
    (y * torch.randn_like(y)).sum().backward()
    g = enc.blocks[0].kernel.weight.grad.abs()
    assert (g[0] > 1e-6).all()                                # every lag of the forward kernel
    if not causal:
        # the backward kernel's lag s weighs input t + s + 1: lags 0 .. L-2 are used, and the
        # last stored lag reaches past any sequence of max_len, so its gradient is 0 (up to the
        # FFT's rounding)
        assert (g[1, :, :L - 1] > 1e-6).all() and (g[1, :, L - 1] < 1e-12).all()


def test_gradcheck_input_and_kernel():
    torch.manual_seed(3)
    enc = FreeConvEncoder(tiny(d_model=2, n_layers=1, max_len=6, kernel_init_std=0.5)).double()
    x = torch.randn(1, 6, 2, dtype=torch.float64, requires_grad=True)
    w = enc.blocks[0].kernel.weight.detach().clone().requires_grad_(True)

    def f(x, w):
        return torch.func.functional_call(enc, {"blocks.0.kernel.weight": w}, (x,))

    assert torch.autograd.gradcheck(f, (x, w), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_reach_truncates_the_kernel(causal):
    torch.manual_seed(4)
    L, w, t = 16, 3, 8
    layers = build_layers(tiny(causal=causal, n_layers=1, max_len=L, reach=w,
                               kernel_init_std=1.0)).double().eval()
    block = layers.blocks[0]
    (k,) = layers.kernels(L)
    lag = torch.arange(L)
    assert (k[0][:, lag > w] == 0).all() and (k[0][:, lag <= w] != 0).all()
    if not causal:
        assert (k[1][:, lag >= w] == 0).all() and (k[1][:, lag < w] != 0).all()
    z = torch.randn(2, L, 3, dtype=torch.float64)
    with torch.no_grad():
        want = direct_conv_ref(z, cap_reach(block.kernel(L), w)) + block.D * z
        torch.testing.assert_close(block.conv(z), want, rtol=1e-10, atol=1e-10)
    # output t moves with inputs at most w away (on the side the kernel looks) and no others
    x = torch.randn(1, L, 3, dtype=torch.float64, requires_grad=True)
    y = layers(x)[0, t]
    (y * torch.randn_like(y)).sum().backward()
    support = [s for s in range(L) if x.grad[0, s].abs().max() > 1e-12]
    assert support == list(range(t - w, (t if causal else t + w) + 1))


# ------------------------------------------------------------------ config and analyses

def test_config_errors_name_the_field():
    for kw, field in [(dict(d_model=0), "d_model"), (dict(max_len=0), "max_len"),
                      (dict(lr=0.0), "lr"), (dict(kernel_init_std=-1.0), "kernel_init_std"),
                      (dict(pooling="first"), "pooling"), (dict(norm="group"), "norm"),
                      (dict(head="conv"), "head"), (dict(dropout=1.0), "dropout"),
                      (dict(reach=-1), "reach")]:
        with pytest.raises(ValueError, match=rf"FreeConvConfig\.{field}"):
            FreeConvConfig(**kw)


def test_config_round_trips_through_the_registry():
    assert FreeConvConfig in MODEL_CONFIG_TYPES
    cfg = tiny(causal=True, reach=5, kernel_init_std=1e-3, norm="batch", head="linear")
    d = json.loads(json.dumps(model_config_to_dict(cfg)))
    assert d["type"] == "FreeConvConfig" and "positions" not in d and "kind" not in d
    back = model_config_from_dict(d)
    assert back == cfg and type(back) is FreeConvConfig
    assert (cfg.positions, cfg.kind, cfg.init) == ("none", "free_conv", "normal")
    assert cfg.name == "free_conv" and cfg.family == "conv"
    assert isinstance(build_layers(cfg), FreeConvEncoder)


def test_kernel_analyses_read_a_free_conv_model():
    torch.manual_seed(5)
    cfg = tiny(n_layers=2, max_len=32)
    model = classifier_model(cfg, TaskSpec("cls", seq_len=32, num_classes=2, vocab_size=8))
    ds = kernel_decay_comparison(model, L=20)
    assert ds["model"].shape == (2, 20) and ds.attrs["kind"] == "free_conv"
    enc = model.backbone.layers
    ks = enc.kernels(20)
    want = torch.stack([k.abs().amax(dim=(0, 1)) for k in ks]).numpy()
    assert (ds["model"].values == want).all()
    # the kernels are copies: no gradient, and writing to them leaves the weights alone
    assert not any(k.requires_grad for k in ks)
    ks[0].zero_()
    assert enc.blocks[0].kernel.weight.abs().sum() > 0
    base = baseline_encoder(cfg)
    assert isinstance(base, FreeConvEncoder) and base.cfg == cfg


# ------------------------------------------------------------------ models, training, checkpoints

def test_hub_round_trip_gives_identical_outputs(tmp_path):
    torch.manual_seed(6)
    spec = TaskSpec("cls", seq_len=16, num_classes=3, vocab_size=10)
    cfg = tiny(kernel_init_std=0.1)
    model = classifier_model(cfg, spec).eval()
    x = torch.randint(4, 10, (2, 12))
    valid = torch.ones(2, 12, dtype=torch.bool)
    valid[1, 8:] = False
    want = model(x, valid)
    model.save_pretrained(tmp_path / "m")
    torch.manual_seed(123)  # a different init: the loaded weights must overwrite every parameter
    loaded = SequenceModel.from_pretrained(tmp_path / "m")
    torch.testing.assert_close(loaded(x, valid), want, rtol=0, atol=0)
    assert model_config_from_dict(loaded.hub_config["model_config"]) == cfg
    assert not torch.equal(classifier_model(cfg, spec).eval()(x, valid), want)


@pytest.mark.parametrize("causal", [False, True])
def test_two_optimiser_steps_move_the_kernel(causal):
    torch.manual_seed(7)
    spec = TaskSpec("cls", seq_len=16, num_classes=2, vocab_size=10)
    cfg = tiny(causal=causal, d_model=8)
    obj = ObjectiveConfig("causal" if causal else "masked", 0.25, "ce")
    x = torch.randint(4, 10, (4, 16))
    for model in (classifier_model(cfg, spec), pretraining_model(cfg, spec, obj)):
        opt = torch.optim.AdamW(param_groups(model, TrainConfig(lr=1e-3)))
        k0 = model.backbone.layers.blocks[0].kernel.weight.detach().clone()
        for _ in range(2):
            out = model(x)
            loss = (torch.nn.functional.cross_entropy(out, x[:, 0] % 2) if out.dim() == 2 else
                    torch.nn.functional.cross_entropy(out.flatten(0, 1), x.flatten()))
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert torch.isfinite(loss)
        assert not torch.equal(model.backbone.layers.blocks[0].kernel.weight, k0)
        assert model.backbone.causal is causal


def test_pretrain_checkpoint_round_trips_and_finetunes(tmp_path):
    task = digits_task(size=8, n_train=32, val_size=16, test_size=16)   # 2 steps of 16
    cfg = tiny(d_model=8, max_len=64)
    tc = TrainConfig(lr=1e-3, batch_size=16, epochs=1, progress=False, seed=0)
    pt = pretrain(task, cfg, ObjectiveConfig("masked", 0.5, "l1"), tc, tmp_path / "pt")
    assert pt.steps == 2
    ckpt = load_checkpoint(pt.best_checkpoint)
    assert ckpt["model_config"]["type"] == "FreeConvConfig"
    assert model_config_from_dict(ckpt["model_config"]) == cfg
    ft = finetune(task, pt.best_checkpoint, tc, tmp_path / "ft")
    assert ft.steps == 2 and isinstance(ft.model.backbone.layers, FreeConvEncoder)
    # the finetuned backbone started from the pretrained one: its kernels moved from there
    pre = ckpt["model"]["backbone.layers.blocks.0.kernel.weight"]
    assert not torch.equal(ft.model.backbone.layers.blocks[0].kernel.weight.detach().cpu(), pre)
