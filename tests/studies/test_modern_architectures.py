"""Study 13: today's mixers under the paper's protocol. The paper preset gives each mixer the S4
row's settings at S4's parameter count and an lr grid on both supervised sides; the laptop preset
is fair to every model; your layer takes a mixer's protocol."""
import pytest

from spt.config import replace
from spt.models.model import count_parameters_of
from spt.paper import ssm_row
from spt.studies import modern_architectures as m13

STUDY = m13.STUDY


@pytest.fixture(scope="module")
def paper():
    return STUDY.preset("paper", "DATA")


def _arms(preset):
    return {(c["task"], c["model"], c["init"]): e.job
            for e in preset.entries for c in [dict(e.coords)]}


def test_every_mixer_is_sized_to_the_s4_row_of_each_task(paper):
    """Within 10% of S4's count, or the nearest count its heads' width grid allows, but never
    narrower than half the S4 row's width (where that binds, the parameters follow); each arm's
    note says its width and count (Mamba-2 on ListOps: widths in steps of 32; Gated DeltaNet on
    ListOps: 64 wide where S4's count would make it 24)."""
    arms = _arms(paper)
    for task in m13.TASKS:
        target = m13.s4_size(task)
        s4 = ssm_row(task, "s4").model
        for name in m13.MIXERS:
            cfg = m13.mixer_model(name, task)
            n = count_parameters_of(cfg)
            note = m13.size_note(name, task, cfg)
            assert note.startswith(f"{name} on {task}: width D = {cfg.d_model} against the S4 "
                                   f"row's {s4.d_model}")
            assert note in arms[(task, name, "scratch")].note.splitlines(), (task, name)
            assert cfg.d_model >= s4.d_model / 2, (task, name, cfg.d_model)
            floor = m13.floor_width(cfg, s4.d_model)
            if cfg.d_model == floor and abs(n - target) / target >= 0.1 and n > target:
                assert "under the floor of 0.5 x S4's width" in note, note
            elif abs(n - target) / target >= 0.1:
                step = m13.width_step(cfg)
                for d in (cfg.d_model - step, cfg.d_model + step):
                    other = count_parameters_of(replace(cfg, d_model=d))
                    assert abs(other - target) > abs(n - target), (task, name, d)
                assert abs(n - target) / target < 0.15, (task, name)
            assert cfg.n_layers == s4.n_layers and cfg.pooling == s4.pooling
            assert cfg.dropout == s4.dropout and cfg.max_len == s4.max_len
    w = m13.sizes()
    assert w.loc["gated_deltanet", "listops"] == "1,515,434 (d=64)"  # 611,834 (d=24) at S4's count
    assert w.loc["lru", "listops"].endswith("(d=64)")
    # the laptop preset's mixers are all wider than half its S4 (d = 32) already
    laptop = m13.laptop_models(64)
    assert min(c.d_model for c in laptop.values()) >= 16


def test_every_mixer_is_at_its_authors_shape_on_every_task(paper):
    """The values read from the authors' code: mamba_ssm/modules/mamba_simple.py (d_state 16,
    expand 2, d_conv 4), mamba_ssm/modules/mamba2.py (d_state 128, headdim 64),
    mamba_ssm/models/config_mamba.py (rms_norm), fla/layers/gated_deltanet.py (head_dim 256,
    conv_bias False, expand_v 2), fla/models/gla/configuration_gla.py (4 heads, expand_k 0.5,
    expand_v 1, hidden_ratio 4), fla/modules/mlp.py (rounded to 256); the LRU's ring and
    state size per task as its port sets them (LRU_TASKS) and minimal-LRU's lr_factor 0.5."""
    from spt.mixer_authors import LRU_TASKS, gated_deltanet_heads
    from spt.mixer_config import mlp_width
    for task in m13.TASKS:
        mamba, mamba2, gdn, gla, lru = (m13.mixer_model(n, task) for n in m13.MIXERS)
        assert (mamba.d_state, mamba.expand, mamba.d_conv, mamba.mlp_expand) == (16, 2, 4, 0)
        assert (mamba2.d_state, mamba2.head_dim, mamba2.expand, mamba2.mlp_expand) == (128, 64, 2, 0)
        assert gated_deltanet_heads(gdn.d_model, gdn.n_heads, gdn.head_dim)[1] == 256
        assert (gdn.expand_v, gdn.d_conv, gdn.conv_bias) == (2, 4, False)
        assert (gla.n_heads, gla.expand_k, gla.expand_v, gla.gate_rank) == (4, 0.5, 1.0, 16)
        for cfg in (gdn, gla):
            assert mlp_width(cfg) == -(-(cfg.d_model * 8 // 3) // 256) * 256
        assert all(c.block_norm == "rms" for c in (mamba, mamba2, gdn, gla))
        ring = LRU_TASKS[task]
        assert (lru.r_min, lru.r_max, lru.max_phase, lru.d_state) == tuple(ring)
        assert lru.recurrent_lr_scale == 0.5 and lru.mlp_expand == 0
    # the port's PathX ring and phase (the hardest task), and its ListOps ring
    assert tuple(LRU_TASKS["pathx"])[:2] == (0.999, 0.9999)
    assert abs(LRU_TASKS["pathx"].max_phase - 3.14159 / 10) < 1e-4
    assert tuple(LRU_TASKS["listops"])[:2] == (0.0, 0.9)


def test_deviations_name_every_remaining_difference_from_the_authors(paper):
    """STUDY.deviations("paper") prints each way a mixer departs from its authors' layer and
    block, on the cells where it does; and the check behind it names every field changed."""
    from spt import mixer_authors as ma
    from spt.mixer_config import MIXER_CONFIGS
    dev = STUDY.deviations("paper", "DATA")
    readings = dict(zip(dev.loc[dev.field == "reading", "why"],
                        dev.loc[dev.field == "reading", "cells"]))
    printed = {text for entry in paper.entries for v in entry.job.stages(entry.task)
               for text in v.model.departures(v.task.name)}
    assert printed and printed <= set(readings)
    # what remains at the paper preset: nothing else
    inits = {ma.INIT[c.authors].format(name=c.title) for c in MIXER_CONFIGS}
    lr_factors = {ma.LRU_LR_FACTOR.format(ours="0.5x", task=t, theirs=f"{f:g}")
                  for t, f in ma.LRU_PORT_LR_FACTOR.items() if t in m13.TASKS and f != 0.5}
    assert len(lr_factors) == 4  # text 0.1, image, pathfinder and pathx 0.25
    assert printed == {ma.BIDIRECTIONAL, ma.GDN_KEY_WIDTH, ma.LRU_BATCHNORM, ma.LRU_FINAL_NORM,
                       ma.LRU_DROPOUT, ma.MAMBA_DT_BIAS} | inits | lr_factors
    # Mamba's undecayed dt_proj.bias, where mamba_simple.py exempts only A_log and D
    assert "model=mamba " in readings[ma.MAMBA_DT_BIAS] + " "
    assert "mamba_simple.py exempts only A_log and D" in ma.MAMBA_DT_BIAS
    assert "init=causal" not in readings[ma.BIDIRECTIONAL]
    assert "model=gated_deltanet" in readings[ma.GDN_KEY_WIDTH]
    assert "mamba2 on listops" in " ".join(readings)
    # every field of the authors' tables, changed, is named; so are the LRU's ring and state
    for cls in MIXER_CONFIGS:
        base = cls(d_model=256, **({"head_dim": 0, "n_heads": 4} if cls.kind == "gated_deltanet"
                                   else {}))
        for field in cls.authors_fields:
            value = getattr(cls(), field)
            other = {"block_norm": "layer" if value == "rms" else "rms",
                     "conv_bias": not value, "recurrent_lr_scale": None}.get(field)
            if other is None:
                other = value * 2 if value else 1
            changed = replace(base, **{field: other})
            said = changed.departures("text")
            assert any(f" {field} " in t for t in said), (cls.__name__, field, said)
    lru = m13.mixer_model("lru", "text")
    for field, value in (("r_min", 0.1), ("r_max", 0.95), ("max_phase", 1.0), ("d_state", 64)):
        said = replace(lru, **{field: value}).departures("text")
        assert any(t.startswith(f"LRU: {field} ") for t in said), field


def test_every_mixer_gets_the_s4_protocol_and_its_lr_grid_on_both_sides(paper):
    arms = _arms(paper)
    for task in m13.TASKS:
        s4 = ssm_row(task, "s4")
        for name, grid in m13.LR_GRID.items():
            scratch, masked, causal = (arms[(task, name, i)] for i in ("scratch", "masked", "causal"))
            assert scratch.lr_grid == masked.lr_grid == causal.lr_grid == grid
            # from scratch a mixer trains its finetuning settings: the SPT arm's budget
            assert scratch.train == masked.train == causal.train
            assert (scratch.train.epochs, scratch.train.max_time) == (200, 24 * 3600)
            assert scratch.train.patience == s4.finetune.patience
            assert masked.pretrain == s4.pretrain and masked.objective == s4.objective
            assert masked.train.batch_size == s4.finetune.batch_size
            assert not masked.model.causal and causal.model.causal
            assert causal.objective.kind == "causal" and causal.objective.loss == s4.objective.loss
    # Table 2's Transformer and S4 are study 02's arms, and S4 has no causal arm
    assert arms[("text", "s4", "masked")].model == ssm_row("text", "s4").model
    assert ("text", "s4", "causal") not in arms and ("text", "transformer", "causal") not in arms


def test_a_mixers_scratch_and_finetuning_caps_are_equal_on_every_task():
    from spt.studies.commands.plan import caps, plan
    caps = caps(plan(STUDY.name, preset="paper"))
    mixers = caps[caps.index.get_level_values("model").isin(list(m13.MIXERS))]
    assert len(mixers) == len(m13.TASKS) * len(m13.MIXERS)
    for what in ("cap", "budget_h", "patience"):
        assert (mixers[f"scratch_{what}"] == mixers[f"finetune_{what}"]).all(), what
    # the cited S4 runs keep their own caps (ListOps: 40 epochs of 1,920 steps)
    assert caps.loc[("listops", "s4"), "scratch_cap"] == 76_800


def test_the_paper_preset_plans_without_a_flag():
    from spt.studies.commands.plan import plan
    plans = plan(STUDY.name, preset="paper", tasks=["listops"])
    assert plans and not [p for p in plans if p.flags]


def test_the_laptop_preset_is_the_same_protocol_for_every_model():
    p = STUDY.preset("laptop")
    assert len(p.seeds) >= 3
    arms = _arms(p)
    tasks = {t for t, _, _ in arms}
    assert {"digits", "listops"} <= tasks
    for task in tasks:
        models = {m for t, m, _ in arms if t == task}
        assert set(m13.MODELS) <= models
        trains = {arms[(task, m, i)].train for m in models for i in ("scratch", "masked")}
        assert len(trains) == 1  # one supervised setting for every model and both sides
        pretrains = {arms[(task, m, "masked")].pretrain for m in models}
        assert len(pretrains) == 1
        target = count_parameters_of(arms[(task, "s4", "scratch")].model)
        for name in m13.MIXERS:
            n = count_parameters_of(arms[(task, name, "scratch")].model)
            assert abs(n - target) / target < 0.15, (task, name, n, target)


def test_your_layer_takes_a_mixers_protocol():
    p = STUDY.preset("paper", "DATA", tasks=["text"],
                     models={"mine": "spt.models.layer_template:DecayMix"})
    arms = _arms(p)
    mamba = arms[("text", "mamba", "masked")]
    mine = arms[("text", "mine", "masked")]
    assert mine.lr_grid == mamba.lr_grid and mine.pretrain == mamba.pretrain
    assert arms[("text", "mine", "causal")].model.causal


def test_laptop_cells_run_in_their_ci_form(tmp_path):
    """Two mixers' laptop cells at 2 steps per stage through the study runner."""
    from spt.studies.machinery.cells import run_cells
    from spt.studies.machinery.laptop import FewSteps

    cells = STUDY.cells("laptop", seeds=[0], dry=FewSteps(2), device="cpu",
                        only="task=listops model=(mamba|lru) ")
    assert len(cells) == 4
    ds = run_cells(STUDY.name, cells, tmp_path, workers=1, log=lambda s: None)
    assert set(ds.model.values) == {"mamba", "lru"}
    assert bool(ds["test_accuracy"].notnull().all())
    ranks = m13.rankings(ds)
    assert sorted(ranks["rank scratch"]) == sorted(ranks["rank SPT"]) == [1, 2]
