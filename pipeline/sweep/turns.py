"""Whose turn it is to start a study's next trial, so that `--trials N` is N across processes.

Optuna's MaxTrialsCallback counts the trials after each one ends: two processes that end a trial
together both count one left and both start one, so a study ran N+1 (and `tests/test_sweep.py`
saw it). A sweep therefore counts and asks under a lock of the study's database, held from the
count until its new trial is RUNNING there, where the next process's count sees it:

- SQLite: an flock on `<db>.turn` beside the database (SQLite's processes share one machine);
- PostgreSQL: a session advisory lock; MySQL: GET_LOCK, named after the study.

Each is let go by the system when its process dies (the file closed, the connection dropped), so
a killed sweep leaves no lock behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from pipeline.core.errors import PetalsError, first_line


class _FileTurn:
    def __init__(self, path: Path | None):
        self.path = path
        self.file = None

    def take(self) -> None:
        import fcntl

        if self.path is None:  # an in-memory study: one process holds it
            return
        self.file = self.path.open("a")
        fcntl.flock(self.file, fcntl.LOCK_EX)

    def give(self) -> None:
        if self.file is not None:
            self.file.close()  # closing lets the flock go
            self.file = None

    def close(self) -> None:
        self.give()


_STATEMENTS = {  # taking and letting go of a named lock, by database
    "postgresql": ("SELECT pg_advisory_lock(:name)", "SELECT pg_advisory_unlock(:name)"),
    "mysql": ("SELECT GET_LOCK(:name, -1)", "SELECT RELEASE_LOCK(:name)"),
}


class _DatabaseTurn:
    """An advisory lock on a connection of its own, opened for each turn and closed after it: a
    connection idle through a long trial may be dropped by the server or a proxy (MySQL's
    `wait_timeout`), and closing it lets the lock go. A database that fails while the lock is
    taken is one line naming it. (PgBouncer's transaction pooling has no session locks.)"""

    def __init__(self, url: str, kind: str, study: str):
        import sqlalchemy

        from pipeline.core.urls import hidden, shown_url

        digest = hashlib.sha256(f"petals-sweep/{study}".encode()).digest()
        # PostgreSQL names its locks by a 64-bit number, MySQL by a string of at most 64 characters.
        name = int.from_bytes(digest[:8], "big", signed=True) if kind == "postgresql" else digest.hex()[:60]
        self.kind, self.values, self.where = kind, {"name": name}, f"study {study} in {shown_url(url)}"
        self.lock, self.unlock = (sqlalchemy.text(s) for s in _STATEMENTS[kind])
        self.engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
        self.hidden = lambda text: hidden(text, url)  # a driver's error may quote the URL
        self.connection = None

    def take(self) -> None:
        import sqlalchemy.exc

        try:
            self.connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            taken = self.connection.execute(self.lock, self.values).scalar()
        except sqlalchemy.exc.SQLAlchemyError as err:
            self.give()
            raise PetalsError(f"{self.where}: its lock fails ({self.hidden(first_line(err))})") from None
        if self.kind == "mysql" and taken != 1:  # GET_LOCK: 1 taken, 0 or NULL not
            self.give()
            raise PetalsError(f"{self.where}: its lock was not granted (GET_LOCK returned {taken})")

    def give(self) -> None:
        """The lock let go; an error doing so is not raised over the one that may be on its way
        (closing the connection lets the lock go in any case)."""
        import sqlalchemy.exc

        if self.connection is None:
            return
        connection, self.connection = self.connection, None
        try:
            connection.execute(self.unlock, self.values)
        except sqlalchemy.exc.SQLAlchemyError:
            pass
        finally:
            with contextlib.suppress(sqlalchemy.exc.SQLAlchemyError):
                connection.close()

    def close(self) -> None:
        try:
            self.give()
        finally:
            self.engine.dispose()


@contextlib.contextmanager
def turns(url: str, study: str) -> Iterator[_FileTurn | _DatabaseTurn]:
    """The study's turn, taken with `take()` and let go with `give()` (a second `give` does nothing)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    kind = parsed.get_backend_name()
    if kind == "sqlite":
        memory = parsed.database in (None, "", ":memory:")
        turn = _FileTurn(None if memory else Path(f"{parsed.database}.turn"))
    else:
        turn = _DatabaseTurn(url, kind, study)
    try:
        yield turn
    finally:
        turn.close()


# Trials in a row that scored no number (nan, inf) before a sweep stops: Optuna marks each failed
# and the count of trials run leaves it out, so a recipe that diverges at every value drawn would
# otherwise draw and train new trials until TIMEOUT, or forever.
GIVE_UP = 5
NOT_A_NUMBER = "not_a_number"  # the user attribute that marks such a trial


def run_share(found, objective, trials: int, timeout: float | None, url: str, catch=()) -> None:
    """This process's share of the study: trials started until the study's run and running reach
    `trials` (or `timeout` seconds pass), each counted and asked for in its turn. Trials whose
    process died are marked failed first, in the turn, so they are not counted as running. After
    `GIVE_UP` trials in a row that scored no number since it started, one line and no more trials
    (a rerun, after a fix, tries again)."""
    import optuna

    state = optuna.trial.TrialState
    counted = (state.COMPLETE, state.PRUNED, state.RUNNING)
    deadline = None if timeout is None else time.monotonic() + timeout
    since = len(found.get_trials(deepcopy=False))  # trial numbers count up from 0 in a study
    with turns(url, found.study_name) as turn:
        while deadline is None or time.monotonic() < deadline:
            turn.take()
            try:
                with warnings.catch_warnings():  # Optuna calls its heartbeat experimental
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(found)
                present = found.get_trials(deepcopy=False)  # one read serves the count and the check
                if sum(t.state in counted for t in present) >= trials:
                    return
                _give_up_on_no_numbers(found.study_name, present, since)
                found.optimize(_after_start(objective, turn.give), n_trials=1, catch=catch)
            finally:
                turn.give()


def _give_up_on_no_numbers(study: str, present: list, since: int) -> None:
    """A PetalsError when the study's last `GIVE_UP` trials ended since trial `since` (any process's)
    all scored no number. Trials failed for other reasons (a killed process, values another process
    was running) are not counted."""
    import optuna

    state = optuna.trial.TrialState
    ended = [
        t for t in present
        if t.number >= since and (t.state in (state.COMPLETE, state.PRUNED) or t.user_attrs.get(NOT_A_NUMBER))
    ]  # fmt: skip
    last = sorted(ended, key=lambda t: t.number)[-GIVE_UP:]
    if len(last) == GIVE_UP and all(t.user_attrs.get(NOT_A_NUMBER) for t in last):
        numbers = ", ".join(str(t.number) for t in last)
        raise PetalsError(
            f"study {study}: {GIVE_UP} trials in a row ({numbers}) scored no number (nan or inf): "
            "no more are drawn; train one with its values (SET=) to see why, or narrow the space"
        )


def _after_start(objective, started):
    """The objective, calling `started()` first: its trial is RUNNING in the study by then. A score
    that is no number is marked on its trial (Optuna fails it) for `_give_up_on_no_numbers`."""

    def run(trial):
        started()
        score = objective(trial)
        if isinstance(score, float) and not math.isfinite(score):
            trial.set_user_attr(NOT_A_NUMBER, True)
        return score

    return run
