"""The competition a stage works on: its file loaded and checked against its task, or refused in
one line.

The spec (competition/spec.py) is data and names its task and format; this is the floor where the
names meet the registries, and a `Competition` is the three together. Every stage loads its
competition here, so a file naming no known task or format, or one its task cannot serve, stops
before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from competition.spec import CompetitionFileError, CompetitionSpec, competition_file, load_spec
from pipeline.core.errors import PetalsError
from pipeline.formats.base import Format, format_of, layout_of
from pipeline.tasks.base import Task, get_task


def task_of(spec: CompetitionSpec) -> Task:
    """The task the competition file names; for a name no task has, one line naming the file (a
    CompetitionFileError: a ValueError to code that loads specs, a PetalsError to the user)."""
    try:
        return get_task(spec.task)
    except ValueError as err:
        raise CompetitionFileError(f"{competition_file(spec.name)}: {err}") from None


def size_of(config, competition: Competition) -> int:
    """The size a run's id carries (`rundir.run_id`): what the competition's task reads (the
    config's competition), an image's side or a text's tokens."""
    return competition.task.size(config)


def check_network(config, spec: CompetitionSpec, backend: str) -> None:
    """The config's network reads the competition's inputs and builds on `backend`; else one line.
    What fits is the competition's task's to say."""
    task = task_of(spec)
    task.check_network(config, spec, backend)
    task.check_recipe(config, spec)


def check_submission(path, spec: CompetitionSpec, expected_ids):
    """A submission file checked as Kaggle would (competition/submission.py: header, ids), its values
    by the competition's task; its SubmissionSummary, or SubmissionError naming the first defect."""
    from competition import submission

    return submission.check_submission(path, spec, expected_ids, task_of(spec).check_values(spec))


@dataclass(frozen=True)
class Competition:
    """A competition as the stages use it: the spec (plain data), the task that owns everything
    shaped by its label, and the format its files are laid out in with its layout, checked
    against each other. Assembled here, above the tasks, from the names the spec gives."""

    spec: CompetitionSpec
    task: Task
    format: Format
    layout: Any

    @property
    def name(self) -> str:
        return self.spec.name


def load_competition(name: str) -> Competition:
    """The competition `name` (or a path to its .toml), its task and format checked against each
    other; PetalsError in one line for a file that does not load or that its task refuses."""
    try:
        spec = load_spec(name)
        form, layout = format_of(spec), layout_of(spec)  # a table the format refuses names the file
        try:
            task = get_task(spec.task)
            check_fits(task, form, layout, spec)
        except ValueError as err:
            raise ValueError(f"{competition_file(name)}: {err}") from None
    except ValueError as err:
        raise PetalsError(f"competition={name}: {err}") from None
    return Competition(spec, task, form, layout)


def check_fits(task: Task, form: Format, layout, spec: CompetitionSpec) -> None:
    """The task reads what the format holds, the labels' shape, the submission's values and what
    the metric scores; else a ValueError saying which."""
    if task.modality != form.holds:
        raise ValueError(
            f"task {task.name} reads {task.modality}s; data format {form.name} holds {form.holds}s"
        )
    if bool(spec.feature_columns) != task.reads_columns:
        raise ValueError(
            f"task {task.name} reads no [data] feature_columns; an image_table input does"
            if spec.feature_columns
            else f"task {task.name} reads an image's [data] feature_columns; the file names none"
        )
    if spec.feature_columns and not form.reads_columns:
        raise ValueError(f"data format {form.name} reads no [data] feature_columns (image_csv does)")
    reading = form.label_reading(spec, layout)
    if task.numeric_target != reading.numeric:
        gives = "numbers" if reading.numeric else "classes"
        reads = "numbers" if task.numeric_target else "classes"
        raise ValueError(f"task {task.name} reads {reads}; the data's labels give {gives}")
    rank = reading.rank
    if task.label_rank != rank:
        kinds = ("one class an example", "several labels an example")
        raise ValueError(
            f"task {task.name} reads {kinds[task.label_rank]}; the data's labels give {kinds[rank]}"
        )
    if spec.submission_value not in task.submission_kinds:
        raise ValueError(
            f"task {task.name} writes a submission's {' or '.join(task.submission_kinds)}, "
            f"not {spec.submission_value}"
        )
    if (spec.metric.reads == "number") != task.numeric_target:
        reads = "numbers" if spec.metric.reads == "number" else "classes or labels"
        raise ValueError(f"metric {spec.metric.name} scores {reads}; task {task.name} does not")
    if spec.metric.reads_rows != (task.label_rank == 1 and not task.numeric_target):
        reads = "rows of labels" if spec.metric.reads_rows else "one class an example"
        raise ValueError(f"metric {spec.metric.name} scores {reads}; task {task.name} does not")
    task.check_spec(spec)
