"""Reading what older versions of spt wrote: the one place that knows the formats it still reads.

spt reads every file any released version of it wrote, and files keep their meaning:

* checkpoints (``best.pt``, ``last.pt``; format "spt-checkpoint-v1") written before a TrainConfig
  or model-config field existed: the stored config lacks the field and ran with the value in
  :data:`LATER_TRAIN_FIELDS` / :data:`LATER_MODEL_FIELDS`; a ``last.pt`` written before the engine
  kept ``bad_epochs``, ``validated`` or the plateau state (:func:`upgrade_run_state`), before it
  kept one RNG state per rank (:func:`rank_rng_states`), or with every CUDA device's RNG state
  (:func:`cuda_rng_state`); a finetuning ``last.pt`` written before runs recorded the digest of
  their pretrained weights (:func:`pretrained_identity`);
* task specs (in checkpoints and hub configs) written before TaskSpec had ``pair``
  (:func:`upgrade_spec`);
* model configs stored as ``"type": "ModelConfig"`` or with no type at all: a TransformerConfig
  (:data:`OLD_CONFIG_NAMES`); configs holding a field that now is an implementation path
  (:data:`RETIRED_FIELDS`); a model config naming a user layer by an import path spt has since
  renamed (:data:`OLD_LAYER_PATHS`);
* study result files (netCDF, ``attrs["config"]``) whose cell configuration lacks the later fields:
  still their cell (:func:`without_later_fields`, used by spt.studies.machinery.cells); whose
  job's TrainConfigs hold the preset's seed, which the run replaced by the cell's
  (:func:`cell_seeds_as_trained`).
* result files and checkpoints written before spt recorded provenance (the code that made them):
  they have none; :func:`spt.results.provenance` shows empty fields for them, and a study run
  counts them as made by other spt code.

Nothing else in spt reads old formats; a file older than these rules is an error naming it.
"""
from __future__ import annotations

from typing import Optional

# TrainConfig fields added after checkpoints and result files were first written, with the value
# those files ran with: a stored config without the field is read as holding it. (JSON values:
# tuples are stored as lists.)
LATER_TRAIN_FIELDS = {"eval_every": 1, "wd_groups": "matrices", "schedule_steps": None,
                      "plateau_patience": 10, "plateau_factor": 0.2, "lr_milestones": [],
                      "lr_gamma": 0.1, "augment": False, "aux_denoise": 0.0}

# Model-config fields added after checkpoints and result files were first written, with the value
# those files ran with. A config holding that value is stored without the field, so its stored form
# is the one it had before the field existed: a study's result files, a run's last.pt (resuming
# compares stored configs) and hub folders still match the configs that made them. A stored dict
# without the field reads back as holding that value. Every other field is stored, so changing a
# field's default (Mamba2Config.d_state 64 -> 128) changes new configs only: a stored config reads
# back with the value it ran with.
LATER_MODEL_FIELDS = {"head": "mlp", "dt_lr": None, "n_ssm": None, "tie_dropout": False,
                      "reach": None, "task_init": None, "locality_bias": False,
                      "mlp_multiple": 0, "block_norm": "layer",
                      "conv_bias": True, "recurrent_lr_scale": None}

# Fields earlier versions stored that chose only how a run executes, which are now implementation
# paths (TrainConfig.paths, spt.kernels.paths): TransformerConfig's attention backend ("auto",
# "flash", "sdpa", "manual") and local_backend ("gather", "flex"), TrainConfig's cuda_graphs. A
# stored config's value is ignored wherever it is read: a model config builds without it, and it
# never separates two configurations (spt.same_run), whatever its value.
RETIRED_FIELDS = frozenset({"attention", "local_backend", "cuda_graphs"})

# Names under which earlier versions stored a model config type: the Transformer's config was
# called "ModelConfig" (and a dict without "type" was one).
OLD_CONFIG_NAMES = {"ModelConfig": "TransformerConfig"}

# Import paths of spt's own layer modules that were renamed: a LayerConfig stored with the old
# module still builds (e.g. "spt.models.extras:MambaLayer").
OLD_LAYER_PATHS = {"spt.models.extras": "spt.models.library_layers",
                   "spt.models.examples": "spt.models.layer_template"}


def without_later_fields(d: dict, later: dict) -> dict:
    """`d` without the fields of `later` that hold their listed value (how they are stored)."""
    return {k: v for k, v in d.items() if not (k in later and v == later[k])}


def current_layer_path(path: str) -> str:
    """A "module:Class" layer path with a renamed spt module replaced by its current name."""
    module, sep, name = path.partition(":")
    return f"{OLD_LAYER_PATHS.get(module, module)}{sep}{name}"


def upgrade_run_state(state: dict, plateau: Optional[dict] = None) -> dict:
    """A last.pt's run state as the current engine keeps it (a copy).

    bad_evals -> bad_epochs (written when every epoch was validated, so evaluations were epochs);
    patience_best defaults to best and validated to the epoch (both added with eval_every). A
    state written before schedule="plateau" existed gets `plateau` (the engine's fresh plateau
    state, which depends on the selection direction) when it is given.
    """
    out = {"stopped_by": None, "patience_best": state["best"], **state}
    if "bad_evals" in out:
        out["bad_epochs"] = out.pop("bad_evals")
    out.setdefault("validated", out["epoch"])
    if plateau is not None:
        out.setdefault("plateau", dict(plateau))
    return out


def rank_rng_states(checkpoint: dict) -> tuple[int, list]:
    """(the world size a last.pt was written with, its RNG states, one per rank): a last.pt
    written before runs spanned ranks holds one state ("rng") and ran on one process."""
    return checkpoint.get("world_size", 1), checkpoint.get("rng_ranks", [checkpoint["rng"]])


def pretrained_identity(saved: dict, now: dict) -> tuple[dict, dict]:
    """The parts of a finetuning run's saved and current metadata that identify its pretrained
    backbone, for comparing them (copies): the digest of its weights ("pretrained_weights"), not
    the path it was read from ("pretrained_from"), so a results folder that was moved or copied
    resumes; a last.pt written before the digest existed compares the path, as it did."""
    saved, now = dict(saved), dict(now)
    if "pretrained_weights" in now and saved.get("pretrained_weights") is not None:
        saved.pop("pretrained_from", None)
        now.pop("pretrained_from", None)
    elif saved.get("pretrained_weights") is None:
        now.pop("pretrained_weights", None)
    return saved, now


def upgrade_spec(spec: dict) -> dict:
    """A stored TaskSpec's fields as the current TaskSpec takes them: a spec written before pair
    tasks existed is a single-sequence task (``pair`` False)."""
    return {"pair": False, **spec}


def cuda_rng_state(saved, device_index: int):
    """The CUDA RNG state to restore: older checkpoints stored every device's state in a list."""
    if isinstance(saved, (list, tuple)):
        return saved[device_index]
    return saved


def cell_seeds_as_trained(config: dict) -> dict:
    """A stored cell configuration with each TrainConfig of its job at the seed that trained it,
    the cell's (``config["seed"]``), as a cell's job now stores it (a copy).

    Result files written before a cell's job carried its seed stored each stage's TrainConfig with
    the preset's seed (0), which the run replaced by the cell's seed; their stages trained at the
    cell's seed all the same. A TrainConfig is a dict below the top level holding "seed", "lr"
    and "epochs" (a tiny LM's own config, with no epochs, keeps its seed)."""
    seed = config.get("seed") if isinstance(config, dict) else None
    if seed is None:
        return config

    def at_cell_seed(d):
        if isinstance(d, dict):
            out = {k: at_cell_seed(v) for k, v in d.items()}
            if {"seed", "lr", "epochs"} <= out.keys():
                out["seed"] = seed
            return out
        if isinstance(d, list):
            return [at_cell_seed(v) for v in d]
        return d

    return {k: at_cell_seed(v) if k != "seed" else v for k, v in config.items()}
