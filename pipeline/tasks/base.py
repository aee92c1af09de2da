"""The Task interface and its registry (Model Garden's task registry, in a few lines)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pipeline.core.errors import PetalsError
from pipeline.core.named import Registry

if TYPE_CHECKING:
    from competition.spec import CompetitionSpec

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
TASKS = Registry("task")
register = TASKS.register  # class decorator: make a task known by its `name`
get_task = TASKS.named


class Task(ABC):
    """A kind of problem. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    modality: ClassVar[str]  # what a model reads: "image" or "text" (pipeline/networks/__init__.py)
    unit: ClassVar[str]  # an example in the training log: "img" or "ex"

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
        if tta > 1 and "flip" not in spec.keeps_label:  # the extra views are mirrored
            raise PetalsError(
                f"--tta {tta}: competition {spec.name} does not keep the label under a mirror "
                f"(its keeps_label: {', '.join(sorted(spec.keeps_label)) or 'none'}); use --tta 1"
            )

    @abstractmethod
    def check_network(self, config, spec: CompetitionSpec, backend: str) -> None:
        """The config's network reads this task's inputs and builds on `backend`; else one line."""

    @abstractmethod
    def show_batch(self, train, spec: CompetitionSpec, config, out: Path, size: int, where: str) -> Path:
        """What `make inspect` shows of `size` training examples as the model sees them (`train`: the
        training split, pipeline/data/splits.py), written into `out`; its path. `where` (host or
        device) says where the recipe augments."""

    def submission_values(self, probabilities, spec: CompetitionSpec):
        """What a submission row holds: the class id, or P(class 1) for a probability submission."""
        if spec.submission_value == "probability":
            return probabilities[:, 1]
        return probabilities.argmax(axis=1)

    def summary_sizes(self, config, image_size: int | None) -> dict[str, int | None]:
        """The sizes a run's summary records."""
        return {"image_size": None, "sequence_length": None}
