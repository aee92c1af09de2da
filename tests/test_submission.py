"""The submission format check: a valid file passes, each defect Kaggle would reject is named."""

from __future__ import annotations

import pandas as pd
import pytest

from competition.submission import SubmissionError, submission_frame
from pipeline.tasks.competitions import check_submission

IDS = [f"{i:09x}" for i in range(1, 21)]


@pytest.fixture
def good(spec, tmp_path):
    path = tmp_path / "submission.csv"
    submission_frame(spec, IDS, [i % spec.num_classes for i in range(len(IDS))]).to_csv(path, index=False)
    return path


def _edit(path, change):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(change(lines)) + "\n")
    return path


def test_a_valid_file_passes_with_a_summary(good, spec):
    summary = check_submission(good, spec, IDS)
    assert (
        summary.rows == len(IDS) and summary.classes_used == len(IDS) and summary.bytes == good.stat().st_size
    )
    assert pd.read_csv(good).columns.tolist() == ["id", "label"]


def _first_label(value: str):
    return lambda lines: [lines[0], f"000000001,{value}", *lines[2:]]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda lines: lines[:-1], "1 of the 20 test id(s) missing: '000000014'"),
        (lambda lines: [*lines, lines[1]], "1 duplicate id(s): '000000001'"),
        (
            lambda lines: [*lines[:-1], "ffffffff9,3"],
            "1 id(s) not in the test set (sample_submission.csv): 'ffff",
        ),
        (lambda lines: ["Id,Label", *lines[1:]], "header is 'Id,Label', expected 'id,label'"),
        (lambda lines: [f"{line},0" for line in lines], "header is 'id,label,0'"),
        (_first_label("104"), "label 104 for id '000000001' (line 2) is outside 0..103"),
        (_first_label("-1"), "label -1 for id '000000001' (line 2) is outside 0..103"),
        (_first_label("3.0"), "label '3.0' for id '000000001' (line 2) is not an integer"),
        (_first_label("rose"), "label 'rose' for id '000000001'"),
        (_first_label(""), "label '' for id '000000001'"),
        (lambda lines: [], "not a readable CSV"),
    ],
)
def test_each_defect_is_named_in_one_line(good, spec, change, message):
    with pytest.raises(SubmissionError) as caught:
        check_submission(_edit(good, change), spec, IDS)
    text = str(caught.value)
    assert message in text and text.startswith(str(good)) and "\n" not in text


def test_a_missing_file_is_named(spec, tmp_path):
    with pytest.raises(SubmissionError, match=r"nothing\.csv: no such file"):
        check_submission(tmp_path / "nothing.csv", spec, IDS)
