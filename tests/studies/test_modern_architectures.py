"""Study 13: today's mixers under the paper's protocol. The paper preset gives each mixer the S4
row's settings at S4's parameter count and an lr grid on both supervised sides; the laptop preset
is fair to every model; your layer takes a mixer's protocol."""
import pytest

from spt.paper import ssm_row
from spt.studies import modern_architectures as m13
from spt.studies.model_scales import count_parameters_of

STUDY = m13.STUDY


@pytest.fixture(scope="module")
def paper():
    return STUDY.preset("paper", "DATA")


def _arms(preset):
    return {(c["task"], c["model"], c["init"]): e.job
            for e in preset.entries for c in [dict(e.coords)]}


def test_every_mixer_is_sized_to_the_s4_row_of_each_task(paper):
    for task in m13.TASKS:
        target = m13.s4_size(task)
        s4 = ssm_row(task, "s4").model
        for name in m13.MIXERS:
            cfg = m13.mixer_model(name, task)
            assert abs(count_parameters_of(cfg) - target) / target < 0.1, (task, name)
            assert cfg.n_layers == s4.n_layers and cfg.pooling == s4.pooling
            assert cfg.dropout == s4.dropout and cfg.max_len == s4.max_len


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
    caps = m13.caps()
    mixers = caps[caps.index.get_level_values("model").isin(list(m13.MIXERS))]
    assert len(mixers) == len(m13.TASKS) * len(m13.MIXERS)
    for what in ("cap", "budget_h", "patience"):
        assert (mixers[f"scratch_{what}"] == mixers[f"finetune_{what}"]).all(), what
    # the cited S4 runs keep their own caps (ListOps: 40 epochs of 1,920 steps)
    assert caps.loc[("listops", "s4"), "scratch_cap"] == 76_800


def test_the_paper_preset_plans_without_a_flag():
    from spt.studies.plan import plan
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
    from spt.studies.cells import run_cells
    from spt.studies.laptop import FewSteps

    cells = STUDY.cells("laptop", seeds=[0], dry=FewSteps(2), device="cpu",
                        only="task=listops model=(mamba|lru) ")
    assert len(cells) == 4
    ds = run_cells(STUDY.name, cells, tmp_path, workers=1, log=lambda s: None)
    assert set(ds.model.values) == {"mamba", "lru"}
    assert bool(ds["test_accuracy"].notnull().all())
    ranks = m13.rankings(ds)
    assert sorted(ranks["rank scratch"]) == sorted(ranks["rank SPT"]) == [1, 2]
