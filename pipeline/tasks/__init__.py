"""Tasks: one class per kind of problem, registered by name; a competition file names its task.

A task says what a model reads (`modality`: which networks, inputs and augmentations fit), how
a run's size is counted, which test-time views exist, and which recipes serve a competition
that ships none of its own (`recipes/<task>/{cpu,gpu,tpu}.toml`). A new kind of problem is a
new module here holding a `Task` subclass decorated with `@register`, and its recipes.

Importing this package stays cheap (no TensorFlow): the competition spec loads it.
"""

from pipeline.tasks.base import TASKS, Task, get_task, register

# The shipped tasks register themselves on import.
from pipeline.tasks import image_classification, multi_label_image, multi_label_text, text_classification  # noqa: F401  isort: skip
from pipeline.tasks import image_regression, text_regression  # noqa: F401  isort: skip
from pipeline.tasks import composed  # noqa: F401  isort: skip  (after the named ones)

__all__ = ["TASKS", "Task", "get_task", "register"]
