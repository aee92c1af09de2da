"""The Optuna study a sweep fills: where it lives, how it samples and prunes, and its plots.

The study is a real database: SQLite inside the runs dir by default (no set-up; several processes
on one machine share it), or any `STORAGE=postgresql://...` / `mysql://...` URL, so processes on
several machines split one study's trials. Each running trial beats a heartbeat into it: a trial
whose process was killed is marked failed once its heartbeat is `GRACE` seconds old (by the next
process to start or finish a trial), and a killed sweep's rerun goes on with the study.

Sampling is TPE. Its first trials are drawn at random, seeded from the config's seed and the
trial's number (which the database hands out once): the same values whether one process runs
them or several, and no two processes start on the same point. Later trials follow the finished
ones (with `constant_liar`, the running ones count as pending), so they depend on what finished
first.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import socket
import time
import warnings
from pathlib import Path

from pipeline.core.errors import PetalsError, first_line
from pipeline.core.files import write_atomically
from pipeline.core.paths import shown
from pipeline.core.urls import hidden, shown_url

log = logging.getLogger(__name__)

FOLDER = "sweeps"  # runs/sweeps/<study>.db and its plots
PRUNERS = ("median", "hyperband", "none")
ATTEMPTS = 4  # opening a study: a database's first users race to create its tables
HEARTBEAT = 10  # seconds between a running trial's heartbeats
GRACE = 60  # a trial whose heartbeat is older has lost its process (a killed sweep): it failed
RETRIES = 2  # times a killed trial's values are queued again
SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg", "postgresql+psycopg2", "mysql", "mysql+pymysql")
_URL = re.compile(r"(?P<scheme>[a-z0-9+]+)://(?P<rest>[^\s'\"`;|<>$\\]*)")


def storage_url(given: str | None, runs_dir: Path, study: str) -> str:
    """`STORAGE=` as given (checked: a database URL of a known kind, without quotes, spaces or a
    shell's command characters; a bare `postgresql://` or `mysql://` given the driver that is
    installed), or SQLite at runs/sweeps/<study>.db."""
    if given is None:
        folder = runs_dir / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{(folder / f'{study}.db').resolve()}"
    match = _URL.fullmatch(given)
    if match is None or match["scheme"] not in SCHEMES:
        raise PetalsError(
            f"STORAGE={shown(shown_url(given))} is not a database URL (sqlite:///path.db, "
            "postgresql://user@host/db, mysql://user@host/db)"
        )
    driver = _driver(match["scheme"])
    return f"{driver}://{match['rest']}" if driver else given


# SQLAlchemy 2.1 reads a bare `postgresql://` as psycopg 3, which petals does not install (its
# `postgresql` extra is psycopg2), and `mysql://` as mysqlclient: the URL the docs give must work as
# written, so a bare scheme gets the first of its drivers that is installed.
_DRIVERS = {
    "postgresql": (("postgresql+psycopg", "psycopg"), ("postgresql+psycopg2", "psycopg2")),
    "mysql": (("mysql+mysqldb", "MySQLdb"), ("mysql+pymysql", "pymysql")),
}


@functools.cache
def _driver(scheme: str) -> str | None:
    """The dialect+driver a bare scheme is read as here, None where none of its drivers imports."""
    import importlib.util

    return next((name for name, module in _DRIVERS.get(scheme, ()) if importlib.util.find_spec(module)), None)


def _seed(seed: int, number: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{number}".encode()).digest()[:4], "little")


def sampler(seed: int):
    """TPE whose random state is set at each trial from (seed, trial number)."""
    import optuna

    class PerTrialTPE(optuna.samplers.TPESampler):
        def before_trial(self, study, trial) -> None:
            super().before_trial(study, trial)
            state = _seed(seed, trial.number)
            self._rng.rng.seed(state)  # TPE's own draws
            self._random_sampler._rng.rng.seed(state)  # its first trials, at random

    return PerTrialTPE(seed=seed, constant_liar=True)  # trials running elsewhere count as pending


def pruner(name: str):
    """`PRUNER=median` (a trial below the median of the others at the same epoch stops), `hyperband`,
    or `none`."""
    import optuna

    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1)
    if name == "hyperband":  # its largest budget read from the first finished trial's steps
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource="auto")
    if name == "none":
        return optuna.pruners.NopPruner()
    raise PetalsError(f"PRUNER={shown(name)} is not one of {', '.join(PRUNERS)}")


def open_study(name: str, storage: str, direction: str, seed: int, prune: str):
    """The study, created or continued; trials whose process is gone marked failed."""
    import optuna
    import sqlalchemy.exc

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # petals says what each trial did
    where = f"study {name} in {shown_url(storage)}"
    for attempt in range(ATTEMPTS):
        try:
            with warnings.catch_warnings():  # Optuna calls its heartbeat experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                # A trial whose process was killed is failed, and its values queued again (twice at
                # most: a trial that kills its process each time is not retried forever): the rerun
                # finds its run and resumes it.
                retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=RETRIES)
                beats = {
                    "heartbeat_interval": HEARTBEAT,
                    "grace_period": GRACE,
                    "heartbeat_stale_trial_callback": retry,
                }
                database = optuna.storages.RDBStorage(storage, **beats)
            study = optuna.create_study(
                study_name=name,
                storage=database,
                direction=direction,
                sampler=sampler(seed),
                pruner=pruner(prune),
                load_if_exists=True,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
            return study
        except ImportError as err:  # the URL's driver is not installed
            raise PetalsError(
                f"{where}: {err.name or err} is not installed (pip install 'petals-kaggle[postgresql]' "
                "or the database's SQLAlchemy driver)"
            ) from None
        except ValueError as err:  # another direction under the same name
            raise PetalsError(f"{where}: {hidden(str(err), storage)}") from None
        except sqlalchemy.exc.SQLAlchemyError as err:
            # Processes that start together on an empty database race to create its tables: the
            # loser's CREATE fails (PostgreSQL: a unique violation on pg_type) and its retry finds them.
            if attempt + 1 == ATTEMPTS:
                raise PetalsError(
                    f"{where}: the database fails ({hidden(first_line(err), storage)})"
                ) from None
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


def set_attribute(found, frozen, key: str, value) -> None:
    """A user attribute of a trial asked in another process (a kernel's): Optuna sets them through a
    live Trial, which only the asking process holds; the study's storage takes them for any. Study
    `_storage` and FrozenTrial `_trial_id` are Optuna's own names, not its public API: setup.cfg
    holds Optuna below 6, and tests/test_kernel_fanout_trials.py reads the attribute back."""
    found._storage.set_trial_user_attr(frozen._trial_id, key, value)


def mark_trial(trial) -> None:
    """Which process runs the trial (the trial's record says where it ran)."""
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())


def plots(study, folder: Path) -> list[Path]:
    """The optimisation history and, once there are enough finished trials, the parameters'
    importances, as PNGs beside the study."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as optuna_plots

    finished = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    drawn = [("history", optuna_plots.plot_optimization_history)]
    if len(finished) >= 2 and len({k for t in finished for k in t.params}) >= 1:
        drawn.append(("importances", optuna_plots.plot_param_importances))
    written = []
    for kind, draw in drawn:
        path = folder / f"{study.study_name}-{kind}.png"
        try:
            with warnings.catch_warnings():  # Optuna calls its matplotlib plots experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                # Trials that all scored alike: the plot says so (equal importances), not a warning.
                warnings.filterwarnings("ignore", "Target and region quantiles", UserWarning)
                axes = draw(study)
        except (ValueError, RuntimeError) as err:  # importances of a parameter that never varied
            log.info("sweep: no %s plot (%s)", kind, err)
            continue
        write_atomically(path, lambda tmp, figure=axes.figure: figure.savefig(tmp, format="png", dpi=100))
        plt.close(axes.figure)
        written.append(path)
    return written


def summary(found, spec, url: str, runs_dir: Path) -> dict:
    """The study's counts by state, its plots (written now) and its best trial, in one line and a dict."""
    import optuna

    states = [t.state for t in found.trials]
    count = {s.name.lower(): states.count(s) for s in optuna.trial.TrialState if states.count(s)}
    folder = runs_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    drawn = plots(found, folder)
    line = ", ".join(f"{n} {k}" for k, n in count.items())
    said = {"study": found.study_name, "storage": shown_url(url), "trials": count,
            "plots": [str(p) for p in drawn]}  # fmt: skip
    try:
        best = found.best_trial
    except ValueError:  # no trial finished yet
        log.info("sweep: %s: %s; no finished trial yet", found.study_name, line)
        return said
    log.info(
        "sweep: %s: %s; best trial %d: %s %.4f with %s (run %s)",
        found.study_name, line, best.number, spec.metric.title, best.value,
        ", ".join(f"{k}={v}" for k, v in best.params.items()), best.user_attrs.get("run"),
    )  # fmt: skip
    return {**said, "best": {"trial": best.number, "score": best.value, "params": best.params,
                                "run": best.user_attrs.get("run")}}  # fmt: skip
