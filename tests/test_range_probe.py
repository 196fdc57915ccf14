"""The range probe recovers the dependency length of a task built to have one (the lagged copy)."""
import pytest

from spt.analysis.range_probe import capped, needed_span, span_of
from spt.config import TrainConfig, TransformerConfig
from spt.data.lagged import lagged_task
from spt.ssm_config import SSMConfig
from spt.train.runs import train_from_scratch


def test_span_and_capped():
    bi = SSMConfig(kind="s4d", d_model=8, n_layers=2, d_state=8)
    assert span_of(bi) is None
    assert capped(bi, 12).reach == 3 and span_of(capped(bi, 12)) == 12
    causal = TransformerConfig(d_model=8, n_layers=3, n_heads=2, causal=True)
    assert capped(causal, 6).reach == 2 and span_of(capped(causal, 6)) == 6
    with pytest.raises(ValueError, match="use 8 or 12"):
        capped(bi, 10)


def test_needed_span_reads_the_knee():
    curve = {2: 0.34, 4: 0.36, 8: 0.97, 16: 1.0}
    assert needed_span(curve, full=1.0, chance=1 / 3) == 8
    assert needed_span({2: 0.34}, full=1.0, chance=1 / 3) is None
    assert needed_span(curve, full=0.33, chance=1 / 3) is None


def test_the_lagged_copy_needs_exactly_its_lag():
    """Slow by necessity: it trains the probe at several spans until each learns or fails the copy,
    which is the finding checked."""
    lag = 8
    task = lagged_task(seq_len=31, lag=lag, n_train=1000, val_size=300, test_size=300)
    base = SSMConfig(kind="s4d", d_model=32, n_layers=1, d_state=16, max_len=31, dropout=0.0,
                     causal=True)
    train = TrainConfig(lr=3e-3, batch_size=32, epochs=30, warmup_steps=10, schedule="constant",
                        eval_every=5, progress=False, seed=0)

    def accuracy(cfg, out):
        return train_from_scratch(task, cfg, train, out).test_metrics["accuracy"]

    import tempfile
    with tempfile.TemporaryDirectory() as d:
        curve = {k: accuracy(capped(base, k), f"{d}/{k}") for k in (lag - 2, lag)}
    chance = 1 / task.spec.num_classes
    full = curve[lag]  # the task solved at its lag: nothing longer can do better than 100%
    assert full > 0.95, curve
    assert curve[lag - 2] < chance + 0.1, curve  # a shorter span sees no marker-symbol pair
    assert needed_span(curve, full, chance) == lag, curve
