"""Transformer models: causality, padding invariance, pooling, positions, config validation."""
import pytest
import torch

from spt.config import ObjectiveConfig, TransformerConfig
from spt.data.task import TaskSpec
from spt.models import classifier_model, count_parameters, pretraining_model
from spt.models.heads import pool
from spt.models.positions import apply_rotary
from spt.paper import transformer_row

TOK = TaskSpec("tok", seq_len=64, num_classes=5, vocab_size=20)
CONT = TaskSpec("cont", seq_len=64, num_classes=5, d_input=3)


def tiny(**kw):
    base = dict(d_model=16, n_layers=2, n_heads=2, d_ff=32, dropout=0.0, max_len=64)
    return TransformerConfig(**{**base, **kw})


def inputs_for(spec, B, L, g):
    if spec.is_tokens:
        return torch.randint(4, spec.vocab_size, (B, L), generator=g)
    return torch.randn(B, L, spec.d_input, generator=g)


@pytest.mark.parametrize("spec", [TOK, CONT])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rotary", "alibi"])
@pytest.mark.parametrize("local_block", [None, 8])
def test_causal_model_never_sees_the_future(spec, positions, local_block):
    torch.manual_seed(0)
    model = pretraining_model(tiny(causal=True, positions=positions, local_block=local_block), spec,
                              ObjectiveConfig("causal", loss=spec.pretrain_loss)).eval()
    g = torch.Generator().manual_seed(1)
    x = inputs_for(spec, 2, 40, g)
    t = 17
    x2 = x.clone()
    x2[:, t + 1:] = inputs_for(spec, 2, 40 - t - 1, g)
    y1, y2 = model(x), model(x2)
    torch.testing.assert_close(y1[:, : t + 1], y2[:, : t + 1])
    assert not torch.allclose(y1[:, t + 1:], y2[:, t + 1:])


def test_bidirectional_model_sees_the_future():
    torch.manual_seed(0)
    model = pretraining_model(tiny(), TOK, ObjectiveConfig("masked", loss="ce")).eval()
    x = torch.randint(4, 20, (1, 30))
    x2 = x.clone()
    x2[0, -1] = 4 if x[0, -1] != 4 else 5
    assert not torch.allclose(model(x)[:, 0], model(x2)[:, 0])


@pytest.mark.parametrize("pooling", ["mean", "max", "last"])
@pytest.mark.parametrize("causal", [False, True])
def test_classifier_is_invariant_to_padding(pooling, causal):
    torch.manual_seed(0)
    model = classifier_model(tiny(pooling=pooling, causal=causal), CONT).eval()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1, 25, 3, generator=g), torch.randn(1, 40, 3, generator=g)
    batch = torch.zeros(2, 40, 3)
    batch[0, :25], batch[1] = a[0], b[0]
    batch[0, 25:] = 99.0  # garbage in the padding must not matter
    valid = torch.zeros(2, 40, dtype=torch.bool)
    valid[0, :25] = True
    valid[1] = True
    out = model(batch, valid)
    torch.testing.assert_close(out[0], model(a)[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out[1], model(b)[0], rtol=1e-4, atol=1e-5)


def test_pooling_uses_real_positions_only():
    h = torch.tensor([[[1.0], [3.0], [100.0]], [[2.0], [-1.0], [5.0]]])
    valid = torch.tensor([[True, True, False], [True, True, True]])
    assert pool(h, valid, "mean").flatten().tolist() == [2.0, 2.0]
    assert pool(h, valid, "max").flatten().tolist() == [3.0, 5.0]
    assert pool(h, valid, "last").flatten().tolist() == [3.0, 5.0]


def test_rotary_scores_depend_only_on_relative_position():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8, generator=g), torch.randn(1, 1, 1, 8, generator=g)
    L = 12
    qs, ks = apply_rotary(q.expand(1, 1, L, 8)), apply_rotary(k.expand(1, 1, L, 8))
    s = (qs @ ks.transpose(-1, -2))[0, 0]
    torch.testing.assert_close(s[3, 1], s[9, 7])
    torch.testing.assert_close(s[0, 5], s[6, 11])


def test_continuous_model_appends_a_mask_channel():
    model = classifier_model(tiny(), CONT)
    assert model.backbone.encoder.proj.in_features == CONT.d_input + 1
    x = torch.randn(1, 10, 3)
    m = torch.zeros(1, 10, dtype=torch.bool)
    m[0, 3] = True
    model.eval()
    assert not torch.allclose(model(x), model(x, masked=m))


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="n_heads"):
        TransformerConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="pooling"):
        TransformerConfig(pooling="cls")
    with pytest.raises(ValueError, match="causal"):
        pretraining_model(tiny(causal=False), TOK, ObjectiveConfig("causal", loss="ce"))
    with pytest.raises(ValueError, match="l1"):
        pretraining_model(tiny(), CONT, ObjectiveConfig("masked", loss="ce"))
    with pytest.raises(ValueError, match="max_len"):
        classifier_model(tiny(max_len=8), CONT)(torch.randn(1, 9, 3))


def test_table4_presets_have_paper_sizes():
    p = transformer_row("listops", "masked")
    assert (p.model.d_model, p.model.n_layers, p.model.n_heads, p.model.d_ff) == (512, 6, 8, 1024)
    assert p.objective.mask_ratio == 0.1 and p.finetune.lr == 1e-4 and p.pretrain.lr == 1e-3
    img = transformer_row("image", "masked")
    assert img.model.pooling == "max" and img.objective.loss == "l1"
    assert transformer_row("pathx", "masked").model.local_block == 4096
    assert transformer_row("text", "causal").model.causal
    with pytest.raises(KeyError, match="Table 4 rows"):
        transformer_row("image", "nope")
    model = classifier_model(img.model, TaskSpec("image", 1024, 10, d_input=1))
    assert 50_000 < count_parameters(model) < 200_000  # Tay et al.'s small Image Transformer
