"""A run in MLflow, when asked (`TRACK=mlflow`): imported only then, so no other run pays for it.

The store is `MLFLOW_TRACKING_URI` where set (a server, a folder, a database), else SQLite in the
runs dir (`runs/mlflow.db`, artifacts in `runs/mlflow-artifacts/`). One experiment per
competition (`petals-<competition>`); a petals run is the MLflow run tagged `petals.run=<run-id>`
(the newest, when trained again with RETRAIN=1), so evaluate and predict find the run train made.
A CV group's fold is a child of its group's run (`petals.kind=cv_group`, tagged `cv_group=<group>`,
the group's CV score there once it assembles), and a sweep's trial (or a trial's CV group) a child
of its study's run (`petals.study=<study>`): each parent made by the first child that needs it.
MLflow mirrors: the offline leaderboard stays the record, and the runs dir alone rebuilds it. A
store that cannot be reached stops the stage before training, in one line without the URI's
password; one that fails later is a warning, and the run trains on untracked.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from pipeline.core import lock
from pipeline.core.errors import PetalsError, first_line
from pipeline.core.urls import hidden, shown_url

log = logging.getLogger(__name__)

URI_VARIABLE = "MLFLOW_TRACKING_URI"
DATABASE = "mlflow.db"  # the default store, in the runs dir
ARTIFACTS = "mlflow-artifacts"
RUN_TAG, STUDY_TAG, KIND_TAG = "petals.run", "petals.study", "petals.kind"
TRAINER_TAG = "petals.trainer"  # the training process: `host.pid.start` (`lock.process_name`)
GROUP_TAG = "cv_group"  # a fold's and its group's
# What a fold's tags say of its CV group too: its run's tags when a fold makes it.
GROUP_SHARED = ("competition", "recipe", "backbone", "git_commit", "data_fingerprint", STUDY_TAG, "trial")
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: the UI nests a child under it
# MLflow's limits: a param's value (6,000 characters here), a batch's params and metrics.
MAX_VALUE, PARAMS_A_BATCH, METRICS_A_BATCH = 6000, 100, 1000


def tracking_uri(runs_dir: Path) -> str:
    return os.environ.get(URI_VARIABLE) or f"sqlite:///{(Path(runs_dir) / DATABASE).resolve()}"


def _errors() -> tuple[type[BaseException], ...]:
    """What a store raises: MLflow's own, SQLAlchemy's (the SQL stores), a file's or a socket's, and
    a database driver that is not installed."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    return (MlflowException, SQLAlchemyError, OSError, ImportError)


def gone(tag: str | None) -> bool:
    """Whether the trainer a run's tag names has stopped: this process (it trains anew), or a
    process of this host no longer running (`lock.ended`: by pid and start). A run without the tag
    (tracked before it) counts as gone; one of another host, or a process that still runs, does not."""
    return tag is None or tag == lock.process_name() or lock.ended(tag) is True


class MlflowRun:
    """One petals run's MLflow run, found or made in `runs_dir`'s store (or MLFLOW_TRACKING_URI's)."""

    def __init__(self, runs_dir: Path, competition: str, name: str, tags: dict[str, str], new: bool = False):
        """`new`: a fresh MLflow run (train's start), else the newest of this petals run, or a fresh
        one if there is none (`made` says which). Tags with a `petals.study` make the run a child of
        that study's run."""
        level = logging.getLogger("mlflow").level  # quiet unless VERBOSE (pipeline.cli.hush)
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise PetalsError(
                "TRACK=mlflow: mlflow is not installed; `make install TRACK=mlflow` installs it "
                "(the `track` extra)"
            ) from None
        logging.getLogger("mlflow").setLevel(level)  # its import sets INFO: "Creating initial ... tables"
        self.uri = tracking_uri(runs_dir)
        self.where = shown_url(self.uri)
        try:
            self.client = MlflowClient(self.uri)
            self.experiment = self._experiment(runs_dir, f"petals-{competition}")
            found = None if new else self._newest({RUN_TAG: name})
            self.id = found or self._create(name, tags)
            self.made, self.name = found is None, name
        except _errors() as err:
            raise PetalsError(f"TRACK=mlflow: {self.where}: {hidden(first_line(err), self.uri)}") from None
        log.info("mlflow: %s is run %s in %s", name, self.id, self.where)

    def _experiment(self, runs_dir: Path, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        # The default store keeps its artifacts beside it; a given one keeps them where it says.
        place = None if os.environ.get(URI_VARIABLE) else (Path(runs_dir) / ARTIFACTS).resolve().as_uri()
        return self.client.create_experiment(name, artifact_location=place)

    def _newest(self, tags: dict[str, str]) -> str | None:
        query = " and ".join(f"tags.`{key}` = '{value}'" for key, value in tags.items())
        found = self.client.search_runs(
            [self.experiment], query, max_results=1, order_by=["attributes.start_time DESC"]
        )
        return found[0].info.run_id if found else None

    def _create(self, name: str, tags: dict[str, str]) -> str:
        tags = {**tags, RUN_TAG: name}
        parent = self._parent(tags)
        if parent is not None:
            tags[PARENT_TAG] = parent
        return self.client.create_run(self.experiment, tags=tags, run_name=name).info.run_id

    def _parent(self, tags: dict[str, str]) -> str | None:
        """The run a new one nests under, found or made: a fold's is its CV group's run, a trial's
        (or a trial's CV group's) its study's; None for a run of neither, and for a study's run."""
        kind, group, study = tags.get(KIND_TAG), tags.get(GROUP_TAG), tags.get(STUDY_TAG)
        if group and kind is None:  # a fold
            key = {GROUP_TAG: group, KIND_TAG: "cv_group"}
            shared = {k: tags[k] for k in GROUP_SHARED if k in tags}
            return self._newest(key) or self._create(group, {**shared, **key})
        if study and kind != "study":
            key = {STUDY_TAG: study, KIND_TAG: "study"}
            return self._newest(key) or self._create(study, key)
        return None

    # ------------------------------------------------------------------ logging, guarded

    def _guarded(self, what: str, call, *args) -> None:
        """A store failing mid-run is a warning: the run goes on, the leaderboard is the record."""
        if self.id is None:
            return
        try:
            call(*args)
        except _errors() as err:
            log.warning("mlflow: %s failed, the run is no longer tracked (%s)", what,
                        hidden(first_line(err), self.uri))  # fmt: skip
            self.id = None

    def params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(key, str(value)[:MAX_VALUE]) for key, value in params.items()]
        for start in range(0, len(items), PARAMS_A_BATCH):
            batch = items[start : start + PARAMS_A_BATCH]
            self._guarded("logging params", lambda b=batch: self.client.log_batch(self.id, params=b))

    def tags(self, tags: dict[str, Any]) -> None:
        for key, value in tags.items():
            if value is not None:
                self._guarded("tagging", self.client.set_tag, self.id, key, str(value))

    def metrics(self, values: dict[str, float], step: int = 0) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, float(value), now, step) for key, value in values.items()]
        for start in range(0, len(items), METRICS_A_BATCH):
            batch = items[start : start + METRICS_A_BATCH]
            self._guarded("logging metrics", lambda b=batch: self.client.log_batch(self.id, metrics=b))

    def artifacts(self, paths: list[Path], folder: str | None = None) -> None:
        for path in paths:
            if path.is_file():
                self._guarded(f"storing {path.name}", self.client.log_artifact, self.id, str(path), folder)

    def training(self, resumed: bool) -> None:
        """Train's start, tagged with the process that trains (`TRAINER_TAG`). A resumed run is
        RUNNING again (its stop left it KILLED or FAILED); a new one ends as KILLED this petals
        run's MLflow runs still RUNNING whose trainer is gone: a `kill -9` cannot end its own, and
        RETRAIN=1 then starts another. One trained on another machine sharing the store is left
        as it is: nothing here can tell whether it still trains."""
        self._guarded("tagging the trainer", self.client.set_tag, self.id, TRAINER_TAG, lock.process_name())
        if resumed:
            self._guarded("resuming the run", self.client.update_run, self.id, "RUNNING")
            return
        query = f"tags.`{RUN_TAG}` = '{self.name}' and attributes.status = 'RUNNING'"

        def end_the_killed() -> None:
            for old in self.client.search_runs([self.experiment], query):
                if old.info.run_id == self.id:
                    continue
                if gone(old.data.tags.get(TRAINER_TAG)):
                    self.client.set_terminated(old.info.run_id, "KILLED")
                else:
                    log.warning("mlflow: %s's run %s is still RUNNING, trained by %s; left as it is",
                                self.name, old.info.run_id, old.data.tags[TRAINER_TAG])  # fmt: skip

        self._guarded("ending the runs a kill left running", end_the_killed)

    def finished(self, status: str = "FINISHED") -> None:
        self._guarded("ending the run", self.client.set_terminated, self.id, status)
