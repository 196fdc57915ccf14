"""Every paper preset, field by field, against spt/paper/settings.tsv (the paper's and the
authors' settings, with sources): a value that differs must be a stated departure
(spt.studies.machinery.departures), so a preset that drifts from the paper fails here. Then the settings the
second review found wrong or silent, each checked where it lives."""
import dataclasses

import pytest

from spt.config import replace, to_dict
from spt.paper import SSM_ROWS, ssm_row, transformer_row
from spt.paper.rows import DAY
from spt.studies import QUICKSTART, STUDIES, transformers_vs_s4
from spt.studies.machinery import departures, fidelity
from spt.studies.machinery.stages import StageView, stage_values


def paper_cells():
    """[(study number, coords, StageView)] of every stage of every paper preset."""
    out = []
    for name, study in STUDIES.items():
        for coords, views, _ in study.stage_views("paper"):
            out += [(name[:2], coords, v) for v in views]
    return out


@pytest.fixture(scope="module")
def cells():
    return paper_cells()


def test_the_table_parses_and_every_value_has_a_source():
    lines = fidelity.read_table()
    assert len(lines) > 150
    assert all(line.source for line in lines)
    assert {f for line in lines for f, _ in line.settings} <= set(fidelity.FIELDS)


def test_every_paper_stage_names_a_row_with_its_lr_batch_and_schedule(cells):
    for study, coords, v in cells:
        assert v.row and v.row[0] in fidelity.MODEL_KEYS, (study, coords, v.stage)
        ref = fidelity.reference(study, *v.row, v.stage)  # no two equally specific lines clash
        for field in ("lr", "batch", "schedule", "warmup", "epochs", "betas", "grad_clip",
                      "wd_groups", "budget_h", "patience", "selection", "pooling"):
            assert field in ref, (study, coords, v.stage, field)


def test_every_difference_from_the_paper_is_a_stated_departure(cells):
    found = []
    for study, coords, v in cells:
        found += fidelity.compare(study, coords, v)
    unstated = [(f.coords, f.stage, f.field, fidelity.show(f.ours), fidelity.show(f.theirs))
                for f in found if not f.stated]
    assert not unstated, f"drifted from spt/paper/settings.tsv: {unstated[:10]}"
    assert found  # the departures exist and are found (patience, the text validation split, ...)


def test_every_departure_covers_a_difference(cells):
    used = set()
    for study, coords, v in cells:
        for f in fidelity.compare(study, coords, v):
            model, task = f.row
            used |= {d for d in departures.DEPARTURES
                     if d.covers(study, model, task, f.stage, f.field, f.ours)}
    assert set(departures.DEPARTURES) == used, "a stated departure no preset makes any more"


def test_a_drifted_setting_is_caught_and_a_stated_one_is_explained():
    _, views, _ = STUDIES["02_transformers_vs_s4"].stage_views("paper", tasks=["text"])[0]
    v = views[0]
    assert not [f for f in fidelity.compare("02", {"task": "text"}, v) if not f.stated]
    drifted = dataclasses.replace(v, train=replace(v.train, lr=v.train.lr * 2, warmup_steps=7))
    unstated = {f.field for f in fidelity.compare("02", {"task": "text"}, drifted)
                if not f.stated}
    assert unstated == {"lr", "warmup"}
    stated = [f for f in fidelity.compare("02", {"task": "text"}, v) if f.field == "patience"]
    assert stated and stated[0].reason == departures.GPU_SAVER


def test_a_preset_stage_without_a_row_is_an_error():
    t = transformer_row("text", "rotary_masked")
    v = StageView("finetune", t.finetune, t.model, None)
    with pytest.raises(ValueError, match="names no row"):
        fidelity.compare("02", {"task": "text"}, v)


def test_equally_specific_lines_that_set_one_field_are_an_error(tmp_path):
    table = tmp_path / "t.tsv"
    table.write_text("study\tmodel\ttask\tstage\tsettings\tsource\n"
                     "*\ts4\t*\t*\tlr=1e-3\ta\n*\ts4\t*\t*\tlr=2e-3\tb\n"
                     "*\ts4\ttext\t*\twd=0\tc\n")
    with pytest.raises(ValueError, match="both set lr"):
        fidelity.reference("02", "s4", "text", "finetune", table)
    table.write_text("study\tmodel\ttask\tstage\tsettings\tsource\n*\ts4\t*\t*\tlearning=1\ta\n")
    with pytest.raises(ValueError, match="t.tsv:2"):
        fidelity.reference("02", "s4", "text", "finetune", table)


@pytest.mark.parametrize("name", ["00_quickstart", *STUDIES])
def test_deviations_cover_every_study_and_preset(name):
    study = QUICKSTART if name == QUICKSTART.name else STUDIES[name]
    presets = list(study.presets) + (["paper"] if study is QUICKSTART else [])
    for preset in presets:
        df = study.deviations(preset)
        assert len(df), (name, preset)
        assert not df["why"].str.startswith("UNSTATED").any(), (name, preset)
        if preset == "paper" and study is not QUICKSTART:
            assert set(df["field"]) - {"reading"}, "the paper preset lists its departures"


# ---------------------------------------------------------------- the review's findings, one each
def test_s4_pretraining_warmups_are_the_authors():
    warm = {t: ssm_row(t, "s4").pretrain.warmup_steps for t in
            ("listops", "text", "retrieval", "image", "pathfinder", "pathx")}
    assert warm == {"listops": 2000, "text": 1000, "retrieval": 2500, "image": 1000,
                    "pathfinder": 2500, "pathx": 5000}


def test_pythia_runs_with_the_authors_optimiser_schedules_pooling_and_pixel_tokens():
    from spt.studies import text_corpus
    views = {c["task"]: v[0] for c, v, _ in text_corpus.STUDY.stage_views("paper")
             if c["init"] == "pretrained"}
    for task, v in views.items():
        t = v.train
        assert (tuple(t.betas), t.grad_clip, t.max_time, t.weight_decay) == (
            (0.9, 0.999), None, 2 * DAY, 0.0), task
    sched = {k: (v.train.schedule, v.train.warmup_steps, v.train.schedule_steps)
             for k, v in views.items()}
    assert sched == {"listops": ("cosine", 200, 2000), "text": ("constant", 5000, None),
                     "retrieval": ("constant", 2500, None), "image": ("constant", 2000, None),
                     "pathfinder": ("constant", 2500, None)}
    assert {k: v.model.pooling for k, v in views.items()} == {
        "listops": "mean", "text": "last", "retrieval": "mean", "image": "mean",
        "pathfinder": "last"}
    assert stage_values(views["image"])["tokens"] is True


def test_transformers_on_pathx_and_speech_commands_have_five_days():
    for task, variant in (("pathx", "masked"), ("pathx", "rotary_masked"),
                          ("speech", "rotary_masked"), ("speech", "rotary_causal")):
        p = transformer_row(task, variant)
        assert p.pretrain.max_time == p.finetune.max_time == 5 * DAY
    assert transformer_row("text", "masked").finetune.max_time == DAY


# The final S4 (Gu et al. 2022a, App. D.2 Table 11) as the authors' s4-lra-<task>.yaml give it:
# (layers, width, norm, prenorm, dropout, weight decay, n_ssm, SSM lr, dt lr, dt_min)
FINAL_S4 = {"listops": (8, 128, "batch", False, 0.0, 0.05, None, 1e-3, "run", 1e-3),
            "text": (6, 256, "batch", True, 0.0, 0.05, None, 1e-3, "run", 1e-3),
            "retrieval": (6, 256, "batch", True, 0.0, 0.05, None, 1e-3, "run", 1e-3),
            "image": (6, 512, "layer", False, 0.1, 0.05, 2, 1e-3, "run", 1e-3),
            "pathfinder": (6, 256, "batch", True, 0.0, 0.03, None, 1e-3, None, 1e-3),
            "pathx": (6, 256, "batch", True, 0.0, 0.05, None, 5e-4, None, 1e-4)}


@pytest.mark.parametrize("task", sorted(FINAL_S4))
def test_s4_is_the_final_s4_of_table_11(task):
    for variant in ("s4", "s4_random"):
        if (task, variant) not in SSM_ROWS:
            continue
        p = ssm_row(task, variant)
        m = p.model
        assert (m.n_layers, m.d_model, m.norm, m.prenorm, m.dropout, p.finetune.weight_decay,
                m.n_ssm, m.lr, m.dt_lr, m.dt_min) == FINAL_S4[task], (task, variant)
        assert (m.kind, m.d_state, m.glu, m.causal, m.dt_max) == ("s4", 64, True, False, 0.1)
        assert m.tie_dropout == (task == "image")
        assert p.pretrain.weight_decay == p.scratch.weight_decay == p.finetune.weight_decay


def test_s4_from_scratch_is_the_final_s4_runs_on_the_same_model():
    # Gu et al.'s s4-lra-<task>.yaml at state-spaces/s4 d589d98: (lr, batch, max_epochs, warmup,
    # cosine steps); no early stopping, no time budget; the cited PathX run pools by mean
    runs = {"listops": (1e-2, 50, 40, 1000, 80_000), "text": (1e-2, 16, 32, 1000, 50_000),
            "retrieval": (1e-2, 64, 20, 2500, 50_000), "image": (1e-2, 50, 200, 1000, 200_000),
            "pathfinder": (4e-3, 64, 200, 2500, 500_000),
            "pathx": (5e-4, 16, 50, 10_000, 500_000)}
    for task, run in runs.items():
        p = ssm_row(task, "s4")
        s = p.scratch
        assert (s.lr, s.batch_size, s.epochs, s.warmup_steps, s.schedule_steps) == run, task
        assert (s.schedule, s.max_steps, s.patience, s.max_time) == ("cosine", run[4], None, None)
        assert p.scratch_pooling == ("mean" if task == "pathx" else None), task
    # the SPT authors edited the schedules in their copies: S4 + SPT trains theirs
    assert ssm_row("listops", "s4").finetune.schedule == "constant"
    assert ssm_row("text", "s4").finetune.warmup_steps == 5000
    arms = {i: a for (m, i), a in transformers_vs_s4.paper_arms("text").items() if m == "s4"}
    assert arms["scratch"].model == arms["spt"].model
    assert not arms["scratch"].task_options  # Text at the length S4 + SPT reads
    pathx = {i: a for (m, i), a in transformers_vs_s4.paper_arms("pathx").items() if m == "s4"}
    assert (pathx["scratch"].pooling, pathx["spt"].model.pooling) == ("mean", "max")


def test_the_s4_the_paper_retrained_trains_the_authors_schedule():
    """Table 8 (footnote 5) and Table 9 off its 3M column: the paper's own S4 runs."""
    from spt.studies import compute_tied, model_scales
    s4 = compute_tied.paper_arms("text")["s4"]["scratch"]
    assert (s4.train.warmup_steps, s4.train.lr, s4.train.batch_size) == (5000, 1e-2, 16)
    assert "retrained" in s4.note
    small = model_scales.paper_arms(100e3)["s4", "scratch"]
    assert "retrained" in small.note and "width alone" in small.note
    table2 = model_scales.paper_arms(3e6)["s4", "scratch"]
    assert "retrained" not in table2.note and table2.train == ssm_row("image", "s4").scratch


def _comparisons(study):
    """{cell coordinates but the initialisation: {"scratch": [model], "spt": [model, ...]}}."""
    out = {}
    for coords, views, _ in study.stage_views("paper"):
        key = "spt_share" if "spt_share" in coords else "init"
        if key not in coords:
            continue
        rest = tuple((k, v) for k, v in coords.items() if k != key)
        side = "scratch" if [v.stage for v in views] == ["scratch"] else "spt"
        out.setdefault(rest, {"scratch": [], "spt": []})[side] += [v.model for v in views]
    return out


COMPARING = [n for n, s in STUDIES.items()
             if any(g["scratch"] and g["spt"] for g in _comparisons(s).values())]


@pytest.mark.parametrize("name", COMPARING)
def test_scratch_and_spt_stages_of_a_cell_build_the_same_architecture(name):
    """One model, two initialisations: every stage of a comparison trains the scratch arm's
    model; a causal SPT arm differs only where its objective needs it (causal, last pooling)."""
    groups = _comparisons(STUDIES[name])
    assert groups
    for rest, sides in groups.items():
        if not (sides["scratch"] and sides["spt"]):
            continue
        base = sides["scratch"][0]
        assert all(m == base for m in sides["scratch"]), (name, rest)
        for m in sides["spt"]:
            a, b = to_dict(base), to_dict(m)
            if b.get("causal") and not a.get("causal"):
                for k in ("causal", "pooling"):
                    a.pop(k), b.pop(k)
            assert type(m) is type(base) and a == b, (name, rest)


def test_a_drifted_width_or_norm_is_caught():
    _, views, _ = STUDIES["02_transformers_vs_s4"].stage_views("paper", tasks=["text"])[-1]
    v = views[-1]
    assert v.row[0] == "s4"
    for change, field in ((dict(d_model=128), "width"), (dict(norm="layer"), "norm"),
                          (dict(n_layers=4), "layers"), (dict(prenorm=False), "prenorm"),
                          (dict(dt_lr=None), "dt_lr"), (dict(n_ssm=2), "n_ssm")):
        drifted = dataclasses.replace(v, model=replace(v.model, **change))
        unstated = {f.field for f in fidelity.compare("02", {"task": "text"}, drifted)
                    if not f.stated}
        assert unstated == ({field, "n_ssm"} if field == "width" else {field}), change
    t = STUDIES["02_transformers_vs_s4"].stage_views("paper", tasks=["text"])[0][1][0]
    assert t.row[0] == "transformer_rotary"
    for change, field in ((dict(d_model=256, n_heads=8), "width"), (dict(n_layers=4), "layers"),
                          (dict(d_ff=512), "ff"), (dict(positions="sinusoidal"), "positions")):
        drifted = dataclasses.replace(t, model=replace(t.model, **change))
        assert {f.field for f in fidelity.compare("02", {"task": "text"}, drifted)
                if not f.stated} == {field}, change


def test_patience_is_stated_and_cannot_stop_a_run_in_its_warmup(cells):
    patient = [v for _, _, v in cells if v.train.patience is not None]
    assert patient and all(v.stage != "pretrain" for v in patient)
    # 10 epochs, or 10 full-data epochs of steps on a data fraction (study 04)
    assert all(v.train.patience == departures.PATIENCE * v.train.eval_every for v in patient)
    assert "warmup has ended" in departures.GPU_SAVER  # the engine's rule, tested in
    # tests/test_schedules.py::test_patience_does_not_count_epochs_that_end_in_the_warmup


def test_s4_cosines_follow_the_authors_scheduler_literally():
    caps = {t: (ssm_row(t, "s4").finetune.max_steps, ssm_row(t, "s4").finetune.schedule_steps)
            for t in ("text", "image", "pathx")}
    assert caps == {"text": (50_000,) * 2, "image": (200_000,) * 2, "pathx": (500_000,) * 2}
    assert ssm_row("listops", "s4").finetune.schedule == "constant"


def test_dlr_has_the_authors_sizes_glu_dropout_and_schedules():
    sizes = {"listops": (8, 128, False), "text": (6, 256, True), "image": (6, 512, True),
             "pathx": (6, 256, True)}
    for t, size in sizes.items():
        p = ssm_row(t, "dlr")
        m = p.model
        assert (m.n_layers, m.d_model, m.prenorm) == size, t
        assert (m.glu, m.dropout, m.norm, m.d_state, m.lr, p.finetune.weight_decay) == (
            True, 0.0, "layer", 1024, 1e-4, 0.05)
    assert (ssm_row("text", "dlr").finetune.schedule,
            ssm_row("image", "dlr").finetune.schedule) == ("constant", "constant")
    px = ssm_row("pathx", "dlr").finetune
    assert (px.schedule, px.warmup_steps, px.max_steps) == ("cosine", 5000, 250_000)


def test_study_07_s4s_are_their_configs():
    from spt.studies import modalities
    arms = {t: modalities.s4_arms(t)["spt"].model for t in modalities.TASKS}
    assert {t: (m.d_model, m.d_state, m.n_ssm, m.norm, m.prenorm, m.dropout, m.tie_dropout)
            for t, m in arms.items()} == {
        "speech_causal": (128, 64, 64, "batch", True, 0.0, False),
        "speech_bi": (128, 64, 64, "batch", True, 0.0, False),
        "scifar": (512, 64, 2, "layer", False, 0.1, True),
        "bidmc_hr": (128, 256, 2, "layer", True, 0.0, False),
        "bidmc_rr": (128, 256, 2, "layer", True, 0.0, False),
        "bidmc_spo2": (128, 256, 2, "layer", True, 0.0, False)}
    t = modalities.paper_arms("scifar")[("transformer", "spt")]
    assert t.pretrain.warmup_steps == 2000


def test_weight_decay_groups_and_heads_are_the_authors():
    assert ssm_row("text", "s4").finetune.wd_groups == "all"
    assert transformer_row("listops", "masked").pretrain.wd_groups == "all"
    assert ssm_row("image", "s4").model.head == "linear"
    assert ssm_row("retrieval", "s4").model.head == "mlp"
    heads = {t: transformer_row(t, "masked").model.head for t in
             ("listops", "text", "retrieval", "image", "pathfinder", "pathx")}
    assert heads == {"listops": "linear", "text": "mlp", "retrieval": "mlp", "image": "mlp",
                     "pathfinder": "linear", "pathx": "linear"}


def test_text_length_and_validation_splits_are_stated():
    rows = departures.DEPARTURES
    assert any(d.field == "validation" and d.task == "text" for d in rows)
    assert any(d.field == "validation" and "bidmc" in d.task for d in rows)
    ref = fidelity.reference("02", "s4", "text", "finetune")["seq_len"]
    assert ref.value == 4096 and "2048" in ref.source


def test_deviations_print_every_reading():
    whys = set(STUDIES["02_transformers_vs_s4"].deviations("paper")["why"])
    for text in (departures.COSINE, departures.MAX_EPOCHS, departures.FOUR_GPUS,
                 departures.TEXT_LENGTH, departures.MLP_HEAD):
        assert text in whys
    assert departures.FOUR_GPUS in set(STUDIES["05_text_corpus_pretraining"]
                                       .deviations("paper")["why"])


def test_small_fractions_validate_as_often_in_steps_as_the_full_data():
    views = {(c["task"], c["fraction"], c["init"]): v
             for c, v, _ in STUDIES["04_data_scales"].stage_views("paper")}
    pt, ft = views["text", 0.005, "spt"]
    assert (pt.train.eval_every, ft.train.eval_every, ft.train.patience) == (200, 200, 2000)
    (full,) = views["text", 1.0, "scratch"]
    assert (full.train.eval_every, full.train.patience) == (1, departures.PATIENCE)
    # Text pretraining at 0.005: 40K steps of batch 8 over 112 reviews = 2,857 epochs
    epochs = 40_000 * 8 / 112
    assert epochs / pt.train.eval_every < 15  # validations, as at the full data (about 14)


def test_the_authors_readings_around_the_objective_are_printed_on_their_cells():
    """<eos>, the character vocabulary, causal finetuning, pixel pretraining's selection metric,
    and how masks are drawn and validated: each printed where it applies, naming the authors'
    file."""
    from spt.studies.machinery import departures as dp
    from spt.studies.registry import STUDIES

    study = STUDIES["01_lra_transformers"]
    dev = study.deviations("paper")
    assert set(dev.loc[dev.field == "reading", "why"]) >= {dp.EOS, dp.VOCAB, dp.CAUSAL_FINETUNE,
                                                           dp.PIXEL_SELECTION, dp.MASKS}
    cells: dict = {}
    for coords, views, _ in study.stage_views("paper", "DATA"):
        for text in {t for _, t in dp.readings([(coords, views)])}:
            cells[text] = cells.get(text, "") + " ".join(f"{k}={v}" for k, v in coords.items()) + "; "
    want = {dp.EOS: ("task=listops", "task=retrieval"), dp.VOCAB: ("task=text",),
            dp.CAUSAL_FINETUNE: ("init=causal",), dp.PIXEL_SELECTION: ("task=image",),
            dp.MASKS: ("init=masked",)}
    for text, where in want.items():
        assert text in cells, text[:40]
        assert all(w in cells[text] for w in where), (text[:40], cells[text][:200])
        assert "src/" in text or "configs/" in text  # the authors' file named
    assert "task=image" not in cells[dp.EOS] and "task=listops" not in cells[dp.VOCAB]
    assert "init=masked" not in cells[dp.CAUSAL_FINETUNE]
