"""The `spt` command. `spt --help` lists the subcommands."""
from __future__ import annotations

import argparse
import json
import logging
import sys


def _cmd_env(args) -> int:
    """Versions and the fast paths available on this machine."""
    import torch

    from . import __version__
    from .models.attention import FLASH_AVAILABLE

    try:
        import triton  # noqa: F401
        triton_version = triton.__version__
    except Exception:
        triton_version = None
    info = {"spt": __version__, "torch": torch.__version__, "python": sys.version.split()[0],
            "cuda_available": torch.cuda.is_available(),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "flash_attn": FLASH_AVAILABLE, "triton": triton_version,
            "threads": torch.get_num_threads()}
    if args.json:
        print(json.dumps(info))
    else:
        for k, v in info.items():
            print(f"{k:>15}: {v}")
    return 0


def _cmd_presets(args) -> int:
    """The paper's hyper-parameter presets (Table 4 Transformer rows)."""
    from .paper import TRANSFORMER_ROWS

    print(f"{'task':<12}{'variant':<15}{'d':>5}{'depth':>6}{'heads':>6}{'ff':>6}  {'pool':<5}"
          f"{'obj':<7}{'ratio':>6}{'loss':>5}{'PT lr/bsz':>14}{'FT lr/bsz':>14}")
    for (task, variant), p in TRANSFORMER_ROWS.items():
        m, o = p.model, p.objective
        print(f"{task:<12}{variant:<15}{m.d_model:>5}{m.n_layers:>6}{m.n_heads:>6}{m.d_ff:>6}  "
              f"{m.pooling:<5}{o.kind:<7}{o.mask_ratio if o.kind == 'masked' else '-':>6}{o.loss:>5}"
              f"{p.pretrain.lr:>9.0e}/{p.pretrain.batch_size:<4}{p.finetune.lr:>9.0e}/"
              f"{p.finetune.batch_size:<4}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spt", description="Self-pretraining (SPT) of long-sequence models: pretrain on the "
        "task's own data, finetune, compare with training from scratch.")
    parser.add_argument("--version", action="store_true",
                        help="print spt's version and git commit, and where it runs from")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    p = sub.add_parser("env", help="versions, device, and which fast paths (flash-attn, triton) exist")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_env)
    p = sub.add_parser("presets", help="list the paper's hyper-parameter presets (Table 4)")
    p.set_defaults(func=_cmd_presets)
    from .data.cli import add_data_commands

    add_data_commands(sub)
    from .studies.cli_parsers import add_notebook_commands, add_study_commands, add_tune_command

    add_study_commands(sub)
    add_tune_command(sub)
    add_notebook_commands(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from .provenance import version_line
        print(version_line())
        return 0
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except BrokenPipeError:  # `spt presets | head`
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback
        # an interrupted notebook client leaves an asyncio task whose error asyncio would log,
        # traceback and all, when the task is collected at exit
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        from .studies.commands.output import said
        if not said["interrupted"]:  # a study notebook's own line says it, with what is done
            print("spt: interrupted; what was finished is kept (results, checkpoints); rerun the "
                  "same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
