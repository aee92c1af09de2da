"""Kernel stage: a Kaggle kernel that runs a recipe on the accelerators Kaggle offers today.

The command line of `pipeline.kernels` (`api.kernel`): `generate` writes `kernels/<name>/` and
checks it (`pipeline/kernels/client/generate.py`), `check` checks it again, `push` uploads it, `status`
reports its run, and `output` downloads what it wrote and records the run on the offline leaderboard
(`pipeline/kernels/client/remote.py`). With `--folds K --fold 0,1` the kernel trains those folds of the
recipe's CV group, and `output` merges its fold runs into --runs-dir (`pipeline/cv/merge.py`).
`fanout` pushes one kernel per fold (`pipeline/kernels/client/fanout.py`), or with `--trials N` kernels of
a study's trials, drawn here (`pipeline/sweep/fanout.py`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.core.options import KernelOptions, from_args
from pipeline.kernels.client.metadata import (
    ACCELERATORS,
    CODE_COMPETITION_ACCELERATOR,
    DEFAULT_ACCELERATOR,
    read_metadata,
)
from pipeline.stages import arguments

DEFAULTS = KernelOptions()
ACTIONS = ("generate", "check", "push", "status", "output", "fanout")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.tasks import recipe_config

    parser.add_argument("action", choices=ACTIONS, help="what to do")
    parser.add_argument(
        "--name", default=None, help="kernel folder and slug (default: petals-<competition>-<recipe>)"
    )
    parser.add_argument(
        "--kernels-dir", type=Path, default=DEFAULTS.kernels_dir, help="where kernel folders go"
    )
    parser.add_argument(
        "--owner", default=None, help="Kaggle user that owns the kernel (default: the credentials')"
    )
    parser.add_argument(
        "--accelerator",
        default=None,
        help=f"one of {', '.join(ACCELERATORS)} (default: {DEFAULT_ACCELERATOR}; a code competition: "
        f"{CODE_COMPETITION_ACCELERATOR})",
    )
    parser.add_argument(
        "--resume-from",
        action="append",
        default=[],
        help="attach this kernel's output (owner/slug, or self) and resume its runs; repeatable",
    )
    parser.add_argument(
        "--kernel-type",
        default=DEFAULTS.kernel_type,
        choices=("script", "notebook"),
        help="Kaggle kernel type",
    )
    parser.add_argument(
        "--internet",
        default=None,
        choices=("on", "off"),
        help="kernel internet (pretrained weights download); default on, off for a code competition",
    )
    parser.add_argument(
        "--dataset", action="append", default=[], help="attach a dataset (owner/slug), repeatable"
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="attach a Kaggle model (owner/model/framework/variation/version), repeatable",
    )
    parser.add_argument("--slug", default=None, help="competition slug (default: the spec's first)")
    parser.add_argument(
        "--tta", type=int, default=DEFAULTS.tta, help="TTA passes for the kernel's predictions"
    )
    parser.add_argument(
        "--folds",
        type=int,
        default=None,
        help="K: the kernel trains folds of the recipe's K-fold CV group, not one run (default: one run)",
    )
    parser.add_argument(
        "--fold",
        dest="fold_list",
        type=arguments.fold_list,
        default=(),
        help="with --folds: only these, e.g. 0,1",
    )
    arguments.add_data_dir(parser, help="output: the data dir whose CV group the kernel's folds join")
    arguments.add_runs_dir(parser)
    parser.add_argument(
        "--timeout",
        type=int,
        default=None,
        help="the kernel's longest run, seconds (default: Kaggle's session limit); training stops before it",
    )
    arguments.add_submissions_dir(parser, help="output: the leaderboard")
    arguments.add_track(parser)  # output, fanout: the fold runs collected, as train tracks its own
    fan = parser.add_argument_group("fanout: one kernel per fold of --folds K, or kernels of --trials N")
    fan.add_argument(
        "--concurrent",
        type=int,
        default=DEFAULTS.concurrent,
        help="kernels at once (default: Kaggle's limit for the accelerator: 1 TPU, 2 GPU, 5 CPU)",
    )
    fan.add_argument(
        "--poll-seconds", type=float, default=DEFAULTS.poll_seconds, help="seconds between status rounds"
    )
    fan.add_argument(
        "--wait-seconds",
        type=float,
        default=DEFAULTS.wait_seconds,
        help="stop following after this long (a rerun goes on)",
    )
    fan.add_argument(
        "--trials",
        type=int,
        default=None,
        help="N trials of the recipe's sweep (its study asked here), in kernels of --trials-per-kernel",
    )
    fan.add_argument(
        "--trials-per-kernel", type=int, default=DEFAULTS.trials_per_kernel, help="trials one kernel runs"
    )
    fan.add_argument(
        "--space",
        default=DEFAULTS.space,
        metavar="1|FILE",
        help="with --trials: the search space, as sweep's",
    )
    arguments.add_storage(fan, "with --trials: the study's database URL, as sweep's")
    recipe_config.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    options = from_args(KernelOptions, args)
    result = kernel(args.action, options)
    if args.action == "generate":
        print(f"kernel: {result} ({read_metadata(result)['id']}); push with `make kernel-push`")
    elif args.action == "check":
        print(f"kernel: {result} passes the checks")
    elif args.action == "status":
        print(result)


def kernel(action: str, options: KernelOptions) -> Any:
    """`api.kernel`: the action on the options' kernel (generate, check, push, status, output)."""
    from pipeline.kernels.client import generate, remote
    from pipeline.kernels.client.check import check
    from pipeline.tasks.competitions import load_competition

    generate.check_names(options)
    competition = load_competition(generate.kernel_competition(options))
    if action == "generate":
        return generate.generate(options, competition)
    if action == "fanout" and options.trials is not None:  # a study's trials, asked here
        from pipeline.sweep import fanout as trials

        return trials.fan_out(options, competition)
    if action == "fanout":
        from pipeline.kernels.client import fanout

        return fanout.fanout(options, competition)
    folder = generate.folder_of(options, competition.spec)
    read_metadata(folder)  # one line saying to generate it first
    if action == "check":
        check(folder)
        return folder
    if action == "push":
        check(folder)
        return remote.push(folder, options.timeout)
    if action == "status":
        return remote.status(folder)
    if action == "output":
        # The output's runs name their competition (the kernel's, whatever these options say).
        return remote.output(
            folder,
            options.submissions_dir,
            options.data_dir,
            options.runs_dir,
            competition_of=load_competition,
            track=options.track,
        )
    raise ValueError(f"kernel action {action!r} is not one of {', '.join(ACTIONS)}")
