"""Every input with every target: the pairs no named module registers (a text pair labelled with
several labels, or with a number; an image and its row's columns with any target), composed by
the rule the named tasks follow (`competition.task_names.task_name`), so a competition file may
name any pair (`input`, `target`)."""

from __future__ import annotations

from competition.task_names import INPUTS, TARGETS, task_name
from pipeline.tasks.base import TASKS, register
from pipeline.tasks.inputs.image import ImageInput
from pipeline.tasks.inputs.image_table import ImageTableInput
from pipeline.tasks.inputs.text import TextInput, TextPairInput
from pipeline.tasks.targets.multi_label import MultiLabel
from pipeline.tasks.targets.regression import Regression
from pipeline.tasks.targets.single_label import SingleLabel

INPUT_PARTS = {
    "image": ImageInput,
    "text": TextInput,
    "text_pair": TextPairInput,
    "image_table": ImageTableInput,
}
TARGET_PARTS = {"class": SingleLabel, "labels": MultiLabel, "number": Regression}


def _compose(input_: str, target: str) -> None:
    name = task_name(input_, target)
    if name in TASKS:  # a named module's (image_classification.py ...)
        return
    title = "".join(part.title() for part in name.split("_"))
    register(type(title, (TARGET_PARTS[target], INPUT_PARTS[input_]), {"name": name, "__module__": __name__}))


assert set(INPUT_PARTS) == set(INPUTS) and set(TARGET_PARTS) == set(TARGETS)
for _input in INPUTS:
    for _target in TARGETS:
        _compose(_input, _target)
