"""The Optuna study a sweep fills: where it lives, how it samples and prunes, and its plots.

The study is a real database: SQLite inside the runs dir by default (no set-up; several processes
on one machine share it), or any `STORAGE=postgresql://...` / `mysql://...` URL, so processes on
several machines split one study's trials. A killed sweep's rerun opens the same study and goes on;
trials it left running are marked failed, so the count of trials still to run stays right.

Sampling is TPE, seeded per trial from the config's seed and the trial's number (which the
database hands out once): a sweep gives the same trials whether one process runs them or several,
and two processes never draw the same starting points.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import time
from pathlib import Path

from pipeline.core.errors import PetalsError, first_line
from pipeline.core.files import write_atomically
from pipeline.core.paths import shown

log = logging.getLogger(__name__)

FOLDER = "sweeps"  # runs/sweeps/<study>.db and its plots
PRUNERS = ("median", "hyperband", "none")
ATTEMPTS = 4  # opening a study: a database's first users race to create its tables
SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg", "postgresql+psycopg2", "mysql", "mysql+pymysql")
_URL = re.compile(r"(?P<scheme>[a-z0-9+]+)://(?P<rest>[^\s'\"`;|&<>]*)")


def storage_url(given: str | None, runs_dir: Path, study: str) -> str:
    """`STORAGE=` as given (checked: a database URL of a known kind, nothing a shell could read as
    more), or SQLite at runs/sweeps/<study>.db."""
    if given is None:
        folder = runs_dir / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{(folder / f'{study}.db').resolve()}"
    match = _URL.fullmatch(given)
    if match is None or match["scheme"] not in SCHEMES:
        raise PetalsError(
            f"STORAGE={shown(given)} is not a database URL (sqlite:///path.db, postgresql://user@host/db, "
            "mysql://user@host/db)"
        )
    return given


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


def pruner(name: str, epochs: int):
    """`PRUNER=median` (a trial below the median of the others at the same epoch stops), `hyperband`,
    or `none`."""
    import optuna

    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(epochs, 2))
    if name == "none":
        return optuna.pruners.NopPruner()
    raise PetalsError(f"PRUNER={shown(name)} is not one of {', '.join(PRUNERS)}")


def open_study(name: str, storage: str, direction: str, seed: int, prune: str, epochs: int):
    """The study, created or continued; trials a killed process left running marked failed."""
    import optuna
    import sqlalchemy.exc

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # petals says what each trial did
    for attempt in range(ATTEMPTS):
        try:
            return optuna.create_study(
                study_name=name,
                storage=storage,
                direction=direction,
                sampler=sampler(seed),
                pruner=pruner(prune, epochs),
                load_if_exists=True,
            )
        except ValueError as err:  # another direction under the same name
            raise PetalsError(f"study {name} in {storage}: {err}") from None
        except sqlalchemy.exc.SQLAlchemyError as err:
            # Processes that start together on an empty database race to create its tables: the
            # loser's CREATE fails (PostgreSQL: a unique violation on pg_type) and its retry finds them.
            if attempt + 1 == ATTEMPTS:
                raise PetalsError(f"study {name}: the database {storage} fails ({first_line(err)})") from None
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


def mark_trial(trial) -> None:
    """Which process runs the trial, so a rerun on this machine can tell a killed one's."""
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def fail_stale(study) -> int:
    """Trials left RUNNING by a process of this machine that is gone (a killed sweep) become FAIL,
    so they count neither as done nor as running; their count. Other machines' trials are theirs."""
    import optuna

    host = socket.gethostname()
    stale = [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        if t.user_attrs.get("host") == host and not _alive(int(t.user_attrs.get("pid", 0)) or -1)
    ]
    for trial in stale:  # Optuna's storage call: a trial's state, set from outside its process
        study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    return len(stale)


def plots(study, folder: Path) -> list[Path]:
    """The optimisation history and, once there are enough finished trials, the parameters'
    importances, as PNGs beside the study."""
    import warnings

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
                axes = draw(study)
        except (ValueError, RuntimeError) as err:  # importances of a parameter that never varied
            log.info("sweep: no %s plot (%s)", kind, err)
            continue
        write_atomically(path, lambda tmp, figure=axes.figure: figure.savefig(tmp, format="png", dpi=100))
        plt.close(axes.figure)
        written.append(path)
    return written
