"""A study's trials fanned out over Kaggle kernels (`make kernel-fanout TRIALS=8 TRIALS_PER_KERNEL=2`).

A kernel with the internet off cannot reach the study's database, so the study is asked here: each
kernel's trials are drawn before it is pushed (TPE, with the trials still out counted as pending,
so the drawn points spread), the values written into its settings, and each trial tagged with the
fan-out and share that hold it, so a fan-out stopped between asking and saving its state finds its
trials again instead of asking new ones. The kernel trains each trial's run (with FOLDS=K, its CV
group's folds); once its output is collected here (`pipeline/kernels/fanout.py`), each trial is
told its score, the one `make sweep` compares (the schedule's end; a CV group: its folds' mean
there), after checking the run carries the trial's values. A trial its kernel did not finish is
told failed. Kernels cannot prune against each other: every trial runs its whole schedule.
The study is the one `make sweep` of the same recipe, space, overrides and data fills, so trials
run here and trials run on Kaggle are one search.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

from pipeline.core.errors import PetalsError
from pipeline.core.options import KernelOptions, SweepOptions
from pipeline.kernels import fanout, generate
from pipeline.kernels.metadata import SUMMARY, check_accelerator, default_name, read_trials_summary
from pipeline.kernels.shares import Share
from pipeline.sweep import setup as setups
from pipeline.sweep import space, study


def fan_out(options: KernelOptions, report: Callable[[str], None] = print) -> dict:
    """Ask the study for `options.trials` trials, push them in kernels of `trials_per_kernel`, follow
    and collect them, tell the study each one's score; the study's summary (its best trial)."""
    options = generate.resolved(options)
    session = check_accelerator(options.accelerator)
    _check(options)
    opts = SweepOptions(recipe=options.recipe, overrides=options.overrides, folds=options.folds or 0,
                        space=options.space, trials=options.trials, storage=options.storage,
                        data_dir=options.data_dir, runs_dir=options.runs_dir,
                        submissions_dir=options.submissions_dir, pruner="none")  # fmt: skip
    found = setups.setup(opts, session.upper())  # recipe auto: the kernel's accelerator's
    url = study.storage_url(options.storage, options.runs_dir, found.name)
    direction = "maximize" if found.spec.metric.greater_is_better else "minimize"
    trials = study.open_study(found.name, url, direction, found.base.seed, "none")
    base = options.name or f"{default_name(generate.kernel_recipe(options), found.spec.name)}-trials"
    per = options.trials_per_kernel
    count = math.ceil(options.trials / per)

    def new_share(number: int) -> Share:
        size = min(per, options.trials - number * per)
        return Share(number, f"{base}-{number}", trials=_asked(trials, found, base, number, size))

    def options_of(share: Share) -> KernelOptions:
        by_number = {t.number: t for t in trials.get_trials(deepcopy=False)}
        values = tuple(
            (n, tuple(space.override(k, v) for k, v in by_number[n].params.items())) for n in share.trials
        )
        return dataclasses.replace(options, name=share.name, trial_values=values)

    # What the fan-out is: a rerun with other settings would mix trials of two searches.
    settings = {
        "study": found.name,
        "trials": options.trials,
        "trials_per_kernel": per,
        "recipe": options.recipe,
        "overrides": list(options.overrides),
        "folds": options.folds,
        "accelerator": options.accelerator,
        "timeout": options.timeout,
    }
    plan = fanout.Plan(
        kind="trial",
        base=base,
        settings=settings,
        numbers=list(range(count)),
        new_share=new_share,
        options_of=options_of,
        collected=lambda share: _tell(trials, found, options, share, report),
        count=count,
    )
    fanout.fanout(options, plan, report)
    return study.summary(trials, found.spec, url, options.runs_dir)


def _check(options: KernelOptions) -> None:
    if options.trials is None or options.trials < 1:
        raise PetalsError(f"TRIALS={options.trials}: a fan-out of trials runs at least one")
    if options.trials_per_kernel < 1:
        raise PetalsError(f"TRIALS_PER_KERNEL={options.trials_per_kernel}: at least one trial a kernel")
    if options.fold_list:
        raise PetalsError("FOLD= with TRIALS=: each trial is a whole CV group (FOLDS=K), or one run")


def _asked(trials, found: setups.Setup, base: str, number: int, size: int) -> list[int]:
    """The study's trials for share `number`: those asked for it before, then new ones, each drawn
    now (its values fixed) and tagged with the fan-out and share that hold it."""
    mine = sorted(
        t.number
        for t in trials.get_trials(deepcopy=False)
        if t.user_attrs.get("fanout") == base and t.user_attrs.get("share") == number
    )
    while len(mine) < size:
        with warnings.catch_warnings():  # the heartbeat is for trials run here: these run on Kaggle
            warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
            trial = trials.ask()
        for param in found.params:
            param.suggest(trial)
        trial.set_user_attr("fanout", base)
        trial.set_user_attr("share", number)
        trial.set_user_attr("host", f"kaggle kernel {base}-{number}")
        mine.append(trial.number)
    return mine[:size]


def _tell(trials, found: setups.Setup, options: KernelOptions, share: Share, report) -> None:
    """Each of the share's trials told its score from the runs its kernel's output placed here, or
    told failed where the kernel finished none; a trial told before is left as it is."""
    import optuna

    summary = read_trials_summary(options.kernels_dir / share.name / "output" / SUMMARY, share.kernel)
    by_number = {t.number: t for t in trials.get_trials(deepcopy=False)}
    for number in share.trials:
        trial = by_number.get(number)
        if trial is None:
            raise PetalsError(
                f"trial {number} is not in study {found.name}: was the study's database replaced?"
            )
        if trial.state.is_finished():
            continue
        names = summary["trial_runs"].get(str(number))
        metrics = _metrics(found, options, trial, names) if names else None
        if metrics is None:
            trials.tell(number, state=optuna.trial.TrialState.FAIL)
            report(f"trial {number}: its kernel ({share.kernel}) finished no run of it (time limit?): failed")
            continue
        score = setups.judged_score(options.runs_dir, options.folds or 0, found.spec, metrics)
        run = metrics.get("group") or metrics["run"]
        study.set_attribute(trials, trial, "run", run)
        if not math.isfinite(score):  # Optuna records a trial that returns nan as failed
            trials.tell(number, state=optuna.trial.TrialState.FAIL)
            report(f"trial {number}: {run} scored {score}: failed")
            continue
        trials.tell(number, score)
        setups.board_row(options.runs_dir, options.submissions_dir, found.spec, metrics, score,
                         f"{found.name} #{number}")  # fmt: skip
        report(f"trial {number}: {found.spec.metric.title} {score:.4f} ({run}, from {share.kernel})")


def _metrics(found: setups.Setup, options: KernelOptions, trial, names: list[str]) -> dict | None:
    """The metrics that judge the trial (a run's, or its CV group's with the group's id), once its
    runs are here and carry its values; None when they are not (not placed, or unfinished)."""
    from pipeline.core.rundir import RunDir, data_identity
    from pipeline.cv.group import group_id
    from pipeline.data.manifest import read_manifest

    run = RunDir(options.runs_dir / names[0])
    if not run.finished:
        return None
    config = run.read_config()
    for key, value in trial.params.items():
        section, name = key.split(".", 1)
        if getattr(getattr(config, section), name) != value:
            raise PetalsError(
                f"trial {trial.number}: run {run.name} has {key}={getattr(getattr(config, section), name)}, "
                f"not the study's {value}: not told"
            )
    if not options.folds:
        return {"run": run.name}
    group = RunDir(options.runs_dir / group_id(config, data_identity(read_manifest(options.data_dir) or {})))
    return {**group.metrics(), "group": group.name} if group.finished else None
