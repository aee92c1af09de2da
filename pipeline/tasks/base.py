"""The Task interface and its registry (Model Garden's task registry, in a few lines)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pipeline.core.config import check_range
from pipeline.core.errors import PetalsError
from pipeline.core.named import Registry

if TYPE_CHECKING:
    from competition.spec import CompetitionSpec

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
TASKS = Registry("task")
register = TASKS.register  # class decorator: make a task known by its `name`
get_task = TASKS.named


@dataclass
class Evaluation:
    """What a task's evaluation adds to a run's evaluation, and the files it writes into the run."""

    fields: dict  # recorded in metrics.json's `evaluation`, beside the metric
    files: dict  # {RunDir file name: writer(path)}
    # The competition's metric of what a submission from these predictions decides, no row judged
    # by a decision it chose: the board's score (a multi-label run's thresholds, cross-fitted).
    score: float

    def write(self, run) -> None:
        for name, writer in self.files.items():
            writer(run.file(name))


@dataclass
class LabelsSummary:
    """What `make inspect` shows of the labelled splits' targets: a table written as `file` into its
    folder, and the lines the terminal shows of it (class counts, or a number's statistics)."""

    file: str
    table: Any  # a pandas DataFrame
    lines: list[str]
    index_label: str | None  # the CSV's index column ("class"), or None for no index


class Task(ABC):
    """A kind of problem. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    modality: ClassVar[str]  # what a model reads: "image" or "text" (pipeline/networks/__init__.py)
    unit: ClassVar[str]  # an example in the training log: "img" or "ex"
    # What turns a headless network's logits into the task's outputs (pipeline/networks/): a
    # softmax over the classes for one class an example, a sigmoid per label for several.
    activation: ClassVar[str]
    # How the linear probe (`train.head_solver=logistic`) fits a head of that activation once, by
    # scikit-learn (pipeline/modeling/head_fits.py): "logistic" regression over the classes,
    # "one_vs_rest" (a logistic regression per label), "ridge" regression of standardised numbers.
    probe: ClassVar[str]
    # What an example's target is (pipeline/data/targets.py): 0, one class id; 1, a row of 0/1
    # over the classes, or of numbers. The competition's data format must read its labels the same way.
    label_rank: ClassVar[int]
    # Whether that target is numbers (a regression's: a row of one float), read from a numeric
    # label column (`labels_are = "numbers"`); its metric then reads numbers.
    numeric_target: ClassVar[bool] = False
    # Whether an example reads its row's numeric columns beside its input (`[data] feature_columns`).
    reads_columns: ClassVar[bool] = False
    # Whether a submission's values are decided with the val predictions (a threshold per label):
    # the stages that write one then pass them to `submission_values`.
    decides_on_val: ClassVar[bool] = False
    # What the training metric ("accuracy" in the logs) is, as the epoch lines and plots title it
    # (`metric_title`: a competition's target may change it).
    train_metric_title: ClassVar[str] = "accuracy"
    # What a submission row may hold (competition/spec.py's SUBMISSION_VALUES) for this task.
    submission_kinds: ClassVar[tuple[str, ...]]

    @property
    def recipes_dir(self) -> Path:
        """The task's own cpu, gpu and tpu recipes: what a competition without its own trains."""
        return RECIPES_DIR / self.name

    def check_spec(self, spec: CompetitionSpec) -> None:
        """A competition file fits this task; ValueError naming what does not."""
        return  # nothing to check by default: a task with demands says them

    @abstractmethod
    def size(self, config) -> int:
        """The size a run id carries: an image's side, or a text's tokens."""

    def check_views(self, spec: CompetitionSpec, tta: int) -> None:
        """`tta` test-time passes make sense for this competition; else one line."""
        if tta < 1:
            raise PetalsError(f"--tta {tta}: the number of passes must be at least 1")
        check_range("tta", tta, "--tta")
        if tta > 1 and "flip" not in spec.keeps_label:  # the extra views are mirrored
            raise PetalsError(
                f"--tta {tta}: competition {spec.name} does not keep the label under a mirror "
                f"(its keeps_label: {', '.join(sorted(spec.keeps_label)) or 'none'}); use --tta 1"
            )

    def test_view(self, config, spec: CompetitionSpec):
        """`view(inputs, index)`: test-time augmentation's pass `index` of a batch of inputs; one
        view, the inputs as they are, unless the task has more (`check_views` says how many)."""
        return lambda inputs, index: inputs

    @abstractmethod
    def check_network(self, config, spec: CompetitionSpec, backend: str) -> None:
        """The config's network reads this task's inputs and builds on `backend`; else one line."""

    def check_recipe(self, config, spec: CompetitionSpec) -> None:
        """What of the config this task does not serve, refused in one line before any work."""
        return

    @abstractmethod
    def show_batch(self, train, spec: CompetitionSpec, config, out: Path, size: int, where: str) -> Path:
        """What `make inspect` shows of `size` training examples as the model sees them (`train`: the
        training split, pipeline/data/splits.py), written into `out`; its path. `where` (host or
        device) says where the recipe augments."""

    # ------------------------------------------------ what the label shapes (single_label.py)

    @abstractmethod
    def label_text(self, label, spec: CompetitionSpec) -> str:
        """A target as `make inspect` titles it: a class id, a row of labels, or a soft row of
        CutMix and MixUp."""

    @abstractmethod
    def labels_summary(self, labeled: dict, spec: CompetitionSpec, config) -> LabelsSummary:
        """What `make inspect` shows of the targets of `labeled` ({split name: split}): examples
        per class of classes and labels, each column's statistics of numbers."""

    def target_summary(self, train, config):
        """What the loss and the network's output take from the training targets, once before
        training (`train`: the training split): the class counts a logit-adjusted loss weighs by,
        None where it is off; a regression's mean and standard deviation."""
        return train.class_counts(config) if config.train.logit_adjustment else None

    def fit_input(self, net, train) -> None:
        """Give the network what it takes from the training inputs (`train`: the training split),
        before training: an image_table's column means and deviations; nothing by default."""
        return

    def fit_output(self, net, summary) -> None:
        """Give the network's output layer what it takes from the training targets (`summary`),
        before training; nothing for a softmax or a sigmoid."""
        return

    @abstractmethod
    def loss(self, train, class_counts=None):
        """The training loss over the task's outputs and targets (a keras Loss), as `train`
        (TrainConfig) says; `class_counts`: `target_summary`'s, for a loss that weighs the classes
        (a regression's, for one that standardises)."""

    def metric_title(self, spec) -> str:
        """The training metric's title for this competition's target (the epoch lines, plots)."""
        return self.train_metric_title

    @abstractmethod
    def train_metric(self, summary=None):
        """The keras metric the training step reports beside the loss (`fit` and the custom loops
        alike), named "accuracy": the history's second column, whatever it measures (a
        regression's is RMSE, `train_metric_title` says so where it is shown). `summary`:
        `target_summary`'s (how many numbers a regression's row holds)."""

    @abstractmethod
    def scores(self, outputs, labels) -> dict[str, float]:
        """The loss and accuracy of a labelled split's outputs (numpy, padding dropped), by name:
        what a run's history and metrics carry beside the competition's metric."""

    @abstractmethod
    def evaluate(self, labels, probabilities, spec: CompetitionSpec, groups=None):
        """What evaluate reports beside the metric: an `Evaluation` (fields recorded in the run's
        metrics, with `val_accuracy` among them, and the files it writes into the run dir).
        `groups`: each row's group, where the competition names them: whatever the task chooses on
        some rows and judges on others keeps a group on one side."""

    @abstractmethod
    def mistakes(self, labels, probabilities, spec: CompetitionSpec):
        """Every wrong row of labelled predictions, the most confidently wrong first, as a pandas
        DataFrame: `row` (its index), `true` and `predicted` (in class names), and one score saying
        how wrong (pipeline/tasks/mistakes.py shows the first few)."""

    @abstractmethod
    def show_mistakes(self, split, shown, config, folder: Path) -> Path:
        """The examples of `shown` (`mistakes`' first rows, with an `id` column) read from `split`
        (pipeline/data/splits.py's `shown_again`), written into `folder` as the input shows best
        (a grid of images, a table of texts); its path."""

    @abstractmethod
    def summary_lines(self, evaluation: dict) -> list[str]:
        """What the terminal shows of an evaluation after its scores."""

    @abstractmethod
    def submission_column(self, values, spec: CompetitionSpec) -> list:
        """A submission's label column as written, from `submission_values`."""

    @abstractmethod
    def check_values(self, spec: CompetitionSpec):
        """`check(path, ids, labels)`: the first value of a submission's label column Kaggle would
        reject, as a SubmissionError naming the row; else the file's SubmissionSummary."""

    @abstractmethod
    def describe_submission(self, spec: CompetitionSpec, summary) -> str:
        """What a checked submission predicts, in a few words (`SubmissionSummary`)."""

    @abstractmethod
    def submission_values(self, probabilities, spec: CompetitionSpec, val=None):
        """What a submission row holds, from the task's outputs [n, classes]; `val`, the val
        predictions with their labels, where the task `decides_on_val`."""

    def summary_sizes(self, config, image_size: int | None) -> dict[str, int | None]:
        """The sizes a run's summary records."""
        return {"image_size": None, "sequence_length": None}
