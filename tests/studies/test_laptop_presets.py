"""The laptop presets: what each one holds (fair budgets, the paper's grid, the paper's encodings)
and their CI form — every cell at a few steps through the study runner, result files checked.
The real laptop runs are benchmarks (README "Laptop presets"), not tests."""
import numpy as np
import pytest

from spt.studies import data_scales, explicit_priors, kernel_decay, lra_transformers, quickstart
from spt.studies.machinery.cells import load_study, run_cells
from spt.studies.machinery.laptop import BATCH, DIGITS_POOL, MIN_PATIENCE_STEPS, FewSteps

GRID_STUDIES = {
    "00_quickstart": (quickstart, ("init", "seed")),
    "01_lra_transformers": (lra_transformers, ("task", "init", "seed")),
    "03_explicit_priors": (explicit_priors, ("task", "model", "ssm_init", "init", "seed")),
    "04_data_scales": (data_scales, ("task", "fraction", "init", "seed")),
}


def _laptop(module):
    return module.PRESETS["laptop"]()


@pytest.mark.parametrize("study", [s for s in GRID_STUDIES if s != "00_quickstart"])
def test_laptop_budgets_are_fair_to_scratch(study):
    """Scratch tries an lr grid (01: the quickstart's scratch, whose lr that grid chose); both
    sides stop on validation with the same patience; SPT's finetuning and scratch share the model
    and the epoch cap."""
    p = _laptop(GRID_STUDIES[study][0])
    assert len(p.seeds) >= 3
    by_init = {}
    for e in p.entries:
        by_init.setdefault(dict(e.coords)["init"], []).append(e.job)
    for arm in by_init["scratch"]:
        assert arm.objective is None and arm.pretrain is None
        if study == "01_lra_transformers":  # the quickstart's laptop cells, shared
            assert arm.train == quickstart.LAPTOP.arms()["scratch"].train
            assert arm.train.lr == quickstart.LAPTOP.scratch_lr and not arm.lr_grid
        else:
            assert len(arm.lr_grid) >= 2
    spt = [a for i, arms in by_init.items() if i != "scratch" for a in arms]
    assert spt and all(a.pretrain is not None and a.objective is not None for a in spt)
    for a in spt + by_init["scratch"]:
        assert a.train.patience and a.train.epochs >= 5 * a.train.patience
        assert a.note.startswith("laptop preset"), "each laptop arm says what it departs from"
    assert {a.train.patience for a in spt} == {a.train.patience for a in by_init["scratch"]}


def test_patience_never_waits_fewer_steps_than_the_floor():
    """Study 04's small fractions have epochs of 2-4 steps: their patience in epochs is raised so
    that every run waits MIN_PATIENCE_STEPS steps, the same as at 100 images (20 epochs)."""
    from spt.data import digits_task

    assert len(digits_task(size=8, val_size=300).train) == DIGITS_POOL
    for e in _laptop(data_scales).entries:
        n = round(dict(e.coords)["fraction"] * DIGITS_POOL)
        steps_per_epoch = -(-n // BATCH)
        patience = e.job.train.patience
        assert patience * steps_per_epoch >= MIN_PATIENCE_STEPS
        assert patience == 20 or (patience - 1) * steps_per_epoch < MIN_PATIENCE_STEPS
    assert {e.job.train.patience for e in _laptop(explicit_priors).entries} == {20}


@pytest.mark.parametrize("study", ["00_quickstart", "03_explicit_priors", "04_data_scales"])
def test_laptop_runs_validate_often_enough_for_their_stopping_rule(study):
    """Validation is thinned (it costs ~40% of a 100-image epoch), but every patience window
    holds at least 5 validations on both sides, the same on both sides, and pretraining validates
    at least 20 times."""
    for e in _laptop(GRID_STUDIES[study][0]).entries:
        t = e.job.train
        assert t.eval_every > 1 and t.patience // t.eval_every >= 5, (e.coords, t)
        if e.job.pretrain is not None:
            pt = e.job.pretrain
            n = {"00_quickstart": 100, "03_explicit_priors": 100}.get(
                study, round(dict(e.coords).get("fraction", 1) * DIGITS_POOL))
            per_epoch = -(-n // BATCH)
            steps = pt.max_steps or pt.epochs * per_epoch
            assert pt.eval_every > 1 and steps / (pt.eval_every * per_epoch) >= 20
    by_coords = {}
    for e in _laptop(GRID_STUDIES[study][0]).entries:
        key = tuple((k, v) for k, v in e.coords if k != "init")
        by_coords.setdefault(key, set()).add(e.job.train.eval_every)
    assert all(len(v) == 1 for v in by_coords.values()), "both sides validate alike"


def test_laptop_presets_use_the_papers_encodings_and_grids():
    # 01: pixel tokens (LRA Image's Transformer encoding), the three arms of Table 1
    p = _laptop(lra_transformers)
    assert [dict(e.coords)["init"] for e in p.entries] == ["scratch", "masked", "causal"]
    assert all(dict(e.ref.options).get("tokens") for e in p.entries)
    causal = p.entries[2].job
    assert causal.model.causal and causal.objective.kind == "causal"
    # 03: S4 and DLR x structured / random x scratch / SPT, continuous pixels (S4's Image input)
    p = _laptop(explicit_priors)
    combos = {(dict(e.coords)["model"], dict(e.coords)["ssm_init"], dict(e.coords)["init"])
              for e in p.entries}
    assert len(combos) == 8
    inits = {(dict(e.coords)["model"], dict(e.coords)["ssm_init"]): e.job.model.init
             for e in p.entries}
    assert inits[("s4", "random")] == inits[("dlr", "random")] == "random"
    assert inits[("s4", "structured")] != "random" and inits[("dlr", "structured")] != "random"
    assert not any(dict(e.ref.options).get("tokens") for e in p.entries)
    # 04: nested fractions, the same number of pretraining steps at every one (Fig. 3)
    p = _laptop(data_scales)
    fractions = sorted({e.ref.fraction for e in p.entries})
    assert len(fractions) >= 4 and fractions[0] <= 0.02
    assert {e.job.pretrain.max_steps for e in p.entries if e.job.pretrain} == {
        data_scales.LAPTOP_PRETRAIN_STEPS}
    # 06: S4 on 16x16 digits, kernels long enough to span many image rows
    cells = kernel_decay.STUDY.cells("laptop")
    assert len(cells) == 3 and cells[0].coords["task"] == "digits16"
    assert cells[0].config["model"]["max_len"] == 256
    assert cells[0].config["pretrain"]["max_steps"] == kernel_decay.LAPTOP_PRETRAIN_STEPS


@pytest.mark.parametrize("study", list(GRID_STUDIES))
def test_laptop_preset_runs_in_its_ci_form(study, tmp_path):
    """Every cell of the laptop preset (seed 0) at 2 steps per stage; the result files hold
    every grid point with finite metrics and the steps each side took."""
    module, dims = GRID_STUDIES[study]
    cells = module.STUDY.cells("laptop", seeds=[0], dry=FewSteps(2), device="cpu")
    ds = run_cells(study, cells, tmp_path, workers=1, log=lambda s: None)
    assert tuple(ds["test_accuracy"].dims) == dims
    assert len(list((tmp_path / study).glob("*.nc"))) == len(cells)
    again = load_study(tmp_path, study)
    assert int(again["test_accuracy"].notnull().sum()) == len(cells)
    acc = ds["test_accuracy"].values
    assert np.all((acc >= 0) & (acc <= 1))
    scratch = ds.sel(init="scratch")
    assert np.all(scratch["steps"].values == 2)
    # every lr of the scratch grid ran: its steps are counted in grid_steps
    (n_lrs,) = {len(e.job.lr_grid) or 1 for e in _laptop(module).entries
                if dict(e.coords)["init"] == "scratch"}
    assert np.all(scratch["grid_steps"].values == 2 * n_lrs)
    spt = ds.sel(init=[i for i in ds["init"].values if i not in ("scratch", "scratch_continuous")])
    assert np.all(spt["pretrain_steps"].values == 2)
    if study == "00_quickstart":  # the budget statement names the one scratch lr and its origin
        assert "Scratch lr 0.001 for every seed, no per-seed grid" in \
            quickstart.describe_budgets(ds, quickstart.LAPTOP)


def test_kernel_decay_laptop_runs_in_its_ci_form(tmp_path):
    cells = kernel_decay.STUDY.cells("laptop", seeds=[0], dry=FewSteps(2), device="cpu")
    ds = run_cells(kernel_decay.STUDY, cells, tmp_path, workers=1, log=lambda s: None)
    assert dict(ds["pretrained"].sizes) == {"task": 1, "seed": 1, "layer": 4, "lag": 256}
    assert float(ds["pretrain_steps"].max()) == 2
    s = kernel_decay.decay_summary(ds)
    assert list(s.index.get_level_values("layer")) == [0, 1, 2, 3]
    assert {"half_lag_pretrained", "half_lag_baseline", "row_peak_pretrained",
            "row_peak_baseline"} <= set(s.columns)
    # what notebook 06 draws from one task's results (the period is then a scalar coordinate)
    import matplotlib
    matplotlib.use("Agg")
    from spt.viz import explore_kernels, fig4_kernel_decay
    from spt.viz.kernel_plots import row_period
    assert row_period(ds.mean("seed"), "digits16") == 16
    fig4_kernel_decay(ds.mean("seed"), log=True)
    explore_kernels(ds.mean("seed"), interactive=False)
