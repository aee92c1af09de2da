"""The names a competition file gives its task by: what its examples read and what they are
labelled with (`input = "text_pair"`, `target = "number"`), instead of naming a task. An
`image_table` example reads its image and the numeric columns of its row (`[data] feature_columns`).

Every input composes with every target (pipeline/tasks/inputs/, targets/), and `task_name` is the
rule that names the pair, the one the named tasks follow (image_classification,
multi_label_text_classification, text_regression...).
"""

from __future__ import annotations

INPUTS = ("image", "text", "text_pair", "image_table")
TARGETS = ("class", "labels", "number")


def task_name(input_: str, target: str) -> str:
    """The task that reads `input_` and predicts `target` (one of INPUTS and TARGETS)."""
    if input_ not in INPUTS or target not in TARGETS:
        raise ValueError(
            f"input {input_!r} and target {target!r}: inputs are {', '.join(INPUTS)}, "
            f"targets {', '.join(TARGETS)}"
        )
    return {
        "class": f"{input_}_classification",
        "labels": f"multi_label_{input_}_classification",
        "number": f"{input_}_regression",
    }[target]
