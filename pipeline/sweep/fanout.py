"""A study's trials fanned out over Kaggle kernels (`make kernel-fanout TRIALS=8 TRIALS_PER_KERNEL=2`).

A kernel with the internet off cannot reach the study's database, so the study is asked here: each
kernel's trials are drawn before it is pushed (TPE, with the trials still out counted as pending,
so the drawn points spread), the values written into its settings, and each trial tagged with the
fan-out and share that hold it, so a fan-out stopped between asking and saving its state finds its
trials again instead of asking new ones. The kernel trains each trial's run (with FOLDS=K, its CV
group's folds); once its output is collected here (`pipeline/kernels/client/fanout.py`), each trial is
told its score, the one `make sweep` compares (the schedule's end; a CV group: its folds' mean
there), after checking the run carries the trial's values; a trial its kernel did not finish, or
whose run is not this data's or not its values, is told failed, with why. Kernels cannot prune
against each other: every trial runs its whole schedule. The study is the one `make sweep` of the
same recipe, space, overrides and data fills, so trials run here and on Kaggle are one search.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.core.errors import PetalsError
from pipeline.core.options import KernelOptions, SweepOptions
from pipeline.kernels.client import fanout, generate, remote
from pipeline.kernels.client.metadata import check_accelerator, default_name
from pipeline.kernels.client.shares import Share
from pipeline.sweep import setup as setups
from pipeline.sweep import space, study, turns

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition

KEPT = ("placed", "here", "kept")  # the trial's run is here: placed now, before, or a local one of its id


@dataclasses.dataclass
class Search:
    """The study a fan-out of trials fills, and what its trials share."""

    options: KernelOptions
    found: setups.Setup
    trials: object  # optuna.Study
    url: str
    base: str


def fan_out(options: KernelOptions, competition: Competition, report: Callable[[str], None] = print) -> dict:
    """Ask the study for `options.trials` trials, push them in kernels of `trials_per_kernel`, follow
    and collect them, tell the study each one's score; the study's summary (its best trial).
    `competition`: the one the options name, as the stage resolved it."""
    options = generate.resolved(options, competition.spec)
    session = check_accelerator(options.accelerator)
    _check(options)
    opts = SweepOptions(recipe=options.recipe, overrides=options.overrides, folds=options.folds or 0,
                        space=options.space, trials=options.trials, storage=options.storage,
                        data_dir=options.data_dir, runs_dir=options.runs_dir,
                        submissions_dir=options.submissions_dir, pruner="none")  # fmt: skip
    found = setups.setup(opts, session.upper(), competition)  # recipe auto: the kernel's accelerator's
    if found.spec.code_competition:  # before any trial is asked
        raise PetalsError(
            f"competition {found.spec.name} is a code competition: its kernel must write the submission, "
            "and a kernel of trials writes runs; sweep it here (make sweep)"
        )
    url = study.storage_url(options.storage, options.runs_dir, found.name)
    direction = "maximize" if found.spec.metric.greater_is_better else "minimize"
    trials = study.open_study(found.name, url, direction, found.base.seed, "none")
    base = options.name or f"{default_name(generate.kernel_recipe(options), found.spec.name)}-trials"
    search = Search(options, found, trials, url, base)
    fanout.fanout(options, competition, trial_plan(search, report), report)
    return study.summary(trials, found.spec, url, options.runs_dir)


def trial_plan(search: Search, report) -> fanout.Plan:
    """Kernels of `trials_per_kernel` trials each, `<base>-<k>`."""
    options, per = search.options, search.options.trials_per_kernel
    count = math.ceil(options.trials / per)
    seen: dict[int, int] = {}  # trial -> the share that holds it, as the state file is read

    def size(number: int) -> int:
        return min(per, options.trials - number * per)

    def check(share: Share) -> None:
        mine = {t.number for t in _tagged(search, share.number)}
        twice = [t for t in share.trials if seen.setdefault(t, share.number) != share.number]
        if not share.trials or len(share.trials) > size(share.number) or twice or set(share.trials) - mine:
            raise PetalsError(f"share {share.number}'s trials {share.trials} are not those the study gave it")

    def options_of(share: Share) -> KernelOptions:
        by_number = {t.number: t for t in search.trials.get_trials(deepcopy=False)}
        values = tuple(
            (n, tuple(space.override(k, v) for k, v in by_number[n].params.items())) for n in share.trials
        )
        return dataclasses.replace(options, name=share.name, trial_values=values)

    def collect(share: Share) -> None:
        kernel, target, _ = remote.download(options.kernels_dir / share.name, "trials")
        o = options
        # Every trial kernel was generated for the study: its runs are on the study's competition.
        placed = remote.place_trials(kernel, target, o.data_dir, o.runs_dir, o.submissions_dir, share.trials,
                                     competition_of=lambda _named: search.found.competition)  # fmt: skip
        _tell(search, share, *placed, report)

    # What the fan-out is: a rerun with other settings would mix trials of two searches.
    settings = {
        "study": search.found.name,
        "storage": study.shown_url(search.url),
        "trials": options.trials,
        "trials_per_kernel": per,
        "recipe": options.recipe,
        "overrides": list(options.overrides),
        "folds": options.folds,
        "accelerator": options.accelerator,
        "timeout": options.timeout,
    }
    return fanout.Plan(
        kind="trial",
        base=search.base,
        settings=settings,
        numbers=list(range(count)),
        count=count,
        new_share=lambda n: Share(n, f"{search.base}-{n}", trials=_asked(search, n, size(n), report)),
        check=check,
        options_of=options_of,
        collect=collect,
    )


def _check(options: KernelOptions) -> None:
    if options.trials is None or options.trials < 1:
        raise PetalsError(f"TRIALS={options.trials}: a fan-out of trials runs at least one")
    if options.trials_per_kernel < 1:
        raise PetalsError(f"TRIALS_PER_KERNEL={options.trials_per_kernel}: at least one trial a kernel")
    if options.fold_list:
        raise PetalsError("FOLD= with TRIALS=: each trial is a whole CV group (FOLDS=K), or one run")


def _tagged(search: Search, number: int) -> list:
    return [
        t
        for t in search.trials.get_trials(deepcopy=False)
        if t.user_attrs.get("fanout") == search.base and t.user_attrs.get("share") == number
    ]


def _asked(search: Search, number: int, size: int, report) -> list[int]:
    """The study's trials for share `number`: those asked for it before and still to run (a fan-out
    stopped before it saved its state), then new ones, each drawn now (its values fixed) and
    tagged with the fan-out and share that hold it. Trials of it past `size` are told failed."""
    import optuna

    mine = sorted(t.number for t in _tagged(search, number) if t.state == optuna.trial.TrialState.RUNNING)
    for extra in mine[size:]:
        search.trials.tell(extra, state=optuna.trial.TrialState.FAIL)
        report(f"trial {extra}: asked for share {number} by a fan-out of other sizes: failed, not run")
    mine = mine[:size]
    # Asked in the study's turn, so a sweep counting the study beside it sees these (turns.py).
    with turns.turns(search.url, search.trials.study_name) as turn:
        turn.take()
        while len(mine) < size:
            with warnings.catch_warnings():  # the heartbeat is for trials run here: these run on Kaggle
                warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
                trial = search.trials.ask()
            trial.set_user_attr("fanout", search.base)
            trial.set_user_attr("share", number)
            trial.set_user_attr("host", f"kaggle kernel {search.base}-{number}")
            for param in search.found.params:
                param.suggest(trial)
            mine.append(trial.number)
    return mine


def _tell(search: Search, share: Share, outcome: dict[int, str], runs: dict[str, list], report) -> None:
    """Each of the share's trials told its score, from its run placed here; told failed, with why,
    where its kernel finished none, or its run is not this data's or not its values; a trial told
    before is left as it is. A run its id's unfinished local run holds back is collected again by
    a rerun."""
    import optuna

    by_number = {t.number: t for t in search.trials.get_trials(deepcopy=False)}
    waiting = []
    for number in share.trials:
        trial = by_number.get(number)
        if trial is None:
            raise PetalsError(
                f"trial {number} is not in study {search.found.name}: was its database replaced?"
            )
        if trial.state.is_finished():
            continue
        if outcome[number] == "busy":  # an unfinished run of its id here: its owner finishes it first
            waiting.append(number)
            continue
        why, metrics = outcome[number], None
        if why in KEPT:
            why, metrics = _metrics(search, trial, runs[str(number)])
        score = setups.judged_score(search.options.runs_dir, search.options.folds or 0,
                                    search.found.spec, metrics) if metrics else math.nan  # fmt: skip
        if not math.isfinite(score):  # Optuna records a trial that returns nan as failed
            search.trials.tell(number, state=optuna.trial.TrialState.FAIL)
            report(f"trial {number}: {why or f'scored {score}'}: failed (kernel {share.kernel})")
            continue
        run = metrics.get("group") or metrics["run"]
        study.set_attribute(search.trials, trial, "run", run)
        spec = search.found.spec  # the row first: a rerun skips a trial told, never its row
        setups.board_row(search.options.runs_dir, search.options.submissions_dir, spec, metrics, score,
                         f"{search.found.name} #{number}")  # fmt: skip
        search.trials.tell(number, score)
        report(f"trial {number}: {spec.metric.title} {score:.4f} ({run}, from {share.kernel})")
    if waiting:
        raise PetalsError(
            f"trial(s) {', '.join(map(str, waiting))}: an unfinished run of the same id is in "
            f"{search.options.runs_dir}; finish or delete it, then rerun to tell the study"
        )


def _metrics(search: Search, trial, names: list[str]) -> tuple[str, dict | None]:
    """The metrics that judge the trial (its run's, or its CV group's with the group's id), once its
    runs are here and carry its values; else why not, and None."""
    from pipeline.core.rundir import RunDir, data_identity
    from pipeline.cv.group import group_id
    from pipeline.data.manifest import read_manifest

    options = search.options
    run = RunDir(options.runs_dir / names[0])
    config = run.read_config()
    for key, value in trial.params.items():
        section, name = key.split(".", 1)
        if getattr(getattr(config, section), name) != value:
            return f"run {run.name} has {key}={getattr(getattr(config, section), name)}, not {value}", None
    if not options.folds:
        return "", {"run": run.name}
    group = RunDir(options.runs_dir / group_id(config, data_identity(read_manifest(options.data_dir) or {})))
    if not group.finished:
        return f"its CV group {group.name} did not assemble (a fold missing)", None
    return "", {**group.metrics(), "group": group.name}
