"""What reaches a terminal or a spreadsheet from elsewhere (issue 64): class names and label ids,
Kaggle's messages and statuses, a downloaded summary's fields. A terminal acts on ESC and CSI
sequences (`\\x1b[2J` clears it, `\\x1b]0;...\\x07` retitles it) and a bidi override reverses what
follows; a spreadsheet runs `=HYPERLINK(...)` and `+cmd|...`. Each case crafts one such input,
drives the stage in this process (the real `kaggle` client on loopback where Kaggle answers), and
asserts the line shown (escaped, cut with a count), the exit code, and what was left on disk.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from competition.spec import SPEC_DIR
from pipeline import cli
from pipeline.core.errors import PetalsError
from pipeline.core.foreign import cell, listed, quoted, text
from pipeline.kernels.client.metadata import METADATA, SUMMARY
from pipeline.runs import leaderboard
from tests.hostile import Tree, one_error_line, record
from tests.kaggle_server import Behaviour, KaggleTestServer

KERNEL = "petals-user/petals-tiny"
RAW = ("\x1b", "\x9b", "\u202e", "\u2066", "\x07")  # what must never reach the terminal as sent
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202eevil\u2066"  # clear, retitle, CSI, bidi override, isolate
ESCAPES_SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202eevil\\u2066"
SUMMARY_FIELDS = {
    "run_id": "default-cnn-192-abc",
    "competition": "flowers",
    "metrics": {"backbone": "cnn", "evaluation": {"val_macro_f1": 0.9, "val_accuracy": 0.9}},
}


def _raw_in(*outputs: str) -> list[str]:
    return [c for c in RAW for output in outputs if c in output]


# ----------------------------------------------------------------------------- the one function


def test_foreign_text_escapes_what_a_terminal_acts_on_and_cuts_with_a_count():
    assert text(ESCAPES) == ESCAPES_SHOWN
    assert text("a\nforged line\u2028b") == "a\\nforged line\\u2028b"  # one line stays one line
    assert text("x" * 500, 10) == "xxxxxxxxxx... (490 more characters)"
    assert quoted("it's") == '"it\'s"' and quoted("\x1b") == "'\\x1b'"
    assert quoted("9" * 100, 20) == "'999999999999999...' (85 more characters)"
    assert listed([f"c{i}" for i in range(1500)], 3) == "c0, c1, c2, ... and 1,497 more"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ('=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")'),
        ("@SUM(1)", "'@SUM(1)"),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("'=already quoted", "'=already quoted"),
        ("-0.25", "-0.25"),  # a number written as text is still a number
        (-0.25, -0.25),
        ("cnn", "cnn"),
    ],
)
def test_a_csv_cell_cannot_start_a_formula_and_numbers_stay_numbers(value, written):
    assert cell(value) == written


# ----------------------------------------------------------------------------- class names, label ids


def _jpeg(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(path)


def _fetch_with_classes(tmp_path: Path, capsys, classes: list[str], label: str) -> tuple[int, str, Tree]:
    """`fetch` of a multi-label image competition (a copy of plant-pathology-2021's file) whose
    classes.txt lists `classes`, from a source whose second image is labelled `label`."""
    comp, source, data = tmp_path / "comp", tmp_path / "source", tmp_path / "data"
    comp.mkdir()
    base = SPEC_DIR / "plant-pathology-2021"
    (comp / "evil.toml").write_text((base / "competition.toml").read_text())
    (comp / "classes.txt").write_text("\n".join(classes) + "\n")
    for name in ("train_images/1.jpg", "train_images/2.jpg", "test_images/3.jpg"):
        _jpeg(source / name)
    (source / "train.csv").write_text(f"image,labels\n1.jpg,{classes[0]}\n2.jpg,{label}\n")
    (source / "sample_submission.csv").write_text(f"image,labels\n3.jpg,{classes[0]}\n")
    work = tuple(data.with_name(data.name + s) for s in ("", ".partial", ".old", ".download"))
    tree = Tree(tmp_path, work)
    args = ["fetch", "--competition", str(comp / "evil.toml"), "--source", "dir", "--from", str(source)]
    code = cli.main([*args, "--data-dir", str(data)])
    captured = capsys.readouterr()
    assert not _raw_in(captured.out, captured.err)
    return code, one_error_line(captured.err), tree


def test_escapes_in_class_names_and_a_label_are_shown_escaped(tmp_path, capsys):
    classes = ["healthy", "\x1b[31mred", "\x9b2Jcsi", "\u202eevil"]
    code, line, tree = _fetch_with_classes(tmp_path, capsys, classes, "\x1b]0;pwned\x07")
    assert code == 2
    assert (
        "label '\\x1b]0;pwned\\x07' is not a class (healthy, \\x1b[31mred, \\x9b2Jcsi, \\u202eevil)" in line
    )
    assert tree.changes() == [] and not (tmp_path / "data").exists()
    record(
        "terminal: escapes in class names and a label",
        "classes.txt `\\x1b[31mred`, `\\x9b2Jcsi`, `\\u202eevil`; label `\\x1b]0;pwned\\x07`",
        line,
        2,
        "data dir not made",
    )


def test_the_class_list_of_an_unknown_label_is_cut_with_a_count(tmp_path, capsys):
    classes = [f"class{i:04d}" for i in range(1500)]
    code, line, tree = _fetch_with_classes(tmp_path, capsys, classes, "nosuch")
    assert code == 2
    assert "label 'nosuch' is not a class (class0000, class0001," in line
    assert "class0019, ... and 1,480 more)" in line and "class0020" not in line
    assert len(line) < 600 + len(str(tmp_path))
    assert tree.changes() == [] and not (tmp_path / "data").exists()
    record("terminal: 1,500 class names", "classes.txt of 1,500 names, an unknown label", line, 2,
           "data dir not made")  # fmt: skip


# ----------------------------------------------------------------------------- Kaggle's answers


def _kernel_folder(tmp_path: Path) -> Path:
    """A kernel folder as `make kernel` leaves it (its metadata is all status and output read)."""
    folder = tmp_path / "kernels" / "petals-tiny"
    folder.mkdir(parents=True)
    (folder / METADATA).write_text(json.dumps({"id": KERNEL, "code_file": "petals_kernel.py"}))
    return folder


def _kernel(action: str, tmp_path: Path) -> list[str]:
    where = ["--kernels-dir", str(tmp_path / "kernels"), "--name", "petals-tiny"]
    return ["kernel", action, *where, *(["--submissions-dir", str(tmp_path / "subs")] * (action == "output"))]


def test_a_kernel_failure_message_with_escapes_is_shown_escaped(tmp_path, in_kaggle_env, capsys):
    _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (tmp_path / "home",))
    behaviour = Behaviour(kernel_status="ERROR", failure_message=ESCAPES + "\nforged: all good")
    with KaggleTestServer(behaviour):
        code = cli.main(_kernel("status", tmp_path))
    captured = capsys.readouterr()
    assert code == 0 and not _raw_in(captured.out, captured.err)
    line = next(line for line in captured.out.splitlines() if line.startswith(f"kernel {KERNEL}"))
    assert line == f"kernel {KERNEL}: error: {ESCAPES_SHOWN}\\nforged: all good"
    assert "forged" not in captured.out.replace(line, "")  # no second line forged
    assert tree.changes() == []
    record("terminal: Kaggle's failure message", "failureMessage with ESC, CSI, bidi, a newline", line, 0,
           "nothing written")  # fmt: skip


def test_an_unknown_kernel_status_is_one_line(tmp_path, in_kaggle_env, capsys):
    _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (tmp_path / "home",))
    with KaggleTestServer(Behaviour(kernel_status="HACKED\x1b[2J")):
        code = cli.main(_kernel("status", tmp_path))
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert code == 2 and not _raw_in(captured.out, captured.err)
    assert (
        f"Kaggle's answer while asking for the status of kernel {KERNEL} is not one this kaggle client "
        "can read (a value it does not know, 'HACKED\\x1b[2J' (a new status?))" in line
    )
    assert tree.changes() == []
    record("kernel status: unknown status", "status `HACKED\\x1b[2J`", line, 2, "nothing written")


def test_an_unknown_submission_status_is_one_line_and_the_board_is_untouched(tmp_path, in_kaggle_env, capsys):
    subs = tmp_path / "subs"
    board = leaderboard.board_file(subs, "flowers")
    leaderboard.update(board, "run-a", kind="run", submission_ref="1001")
    tree = Tree(tmp_path, (tmp_path / "home",))
    submission = {"ref": 1001, "fileName": "a.csv", "description": "petals run-a", "status": "PWNED\u202e"}
    with KaggleTestServer(Behaviour(submissions=[submission])):
        code = cli.main(["leaderboard", "--sync", "--competition", "flowers", "--submissions-dir", str(subs)])
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert code == 2 and not _raw_in(captured.out, captured.err)
    assert (
        "Kaggle's answer while listing your submissions to 'tpu-getting-started' is not one this kaggle "
        "client can read (a value it does not know, 'PWNED\\u202e' (a new status?))" in line
    )
    assert tree.changes() == []
    record("leaderboard-sync: unknown status", "a submission's status `PWNED\\u202e`", line, 2,
           "board untouched")  # fmt: skip


def test_a_formula_as_kaggles_public_score_is_not_written(tmp_path, in_kaggle_env, capsys):
    """Kaggle's scores are numbers: one that is not (`=1+1`, `-2+3`) leaves the cell empty. (Held
    before issue 64 too, by sync's float(); kept so that a sync writing Kaggle's text fails here.)"""
    subs = tmp_path / "subs"
    board = leaderboard.board_file(subs, "flowers")
    leaderboard.update(board, "run-a", kind="run", submission_ref="1001")
    leaderboard.update(board, "run-b", kind="run", submission_ref="1002")
    submissions = [
        {"ref": 1001, "status": "COMPLETE", "publicScore": "=1+1", "privateScore": "-2+3"},
        {"ref": 1002, "status": "COMPLETE", "publicScore": "-0.5"},
    ]
    with KaggleTestServer(Behaviour(submissions=submissions)):
        code = cli.main(["leaderboard", "--sync", "--competition", "flowers", "--submissions-dir", str(subs)])
    capsys.readouterr()
    assert code == 0
    rows = {row["entry"]: row for row in csv.DictReader(board.open())}
    assert rows["run-a"]["public_score"] == rows["run-a"]["private_score"] == ""
    assert rows["run-b"]["public_score"] == "-0.5" and rows["run-b"]["kaggle_status"] == "complete"


# ----------------------------------------------------------------------------- the downloaded summary


def _output(tmp_path: Path, capsys, summary: bytes) -> tuple[int, str, str]:
    """`kernel output` in this process (its kernel folder made), the server holding `summary`: exit
    code, stdout, stderr."""
    if not (tmp_path / "kernels").exists():
        _kernel_folder(tmp_path)
    with KaggleTestServer(Behaviour(kernel_files={SUMMARY: summary})):
        code = cli.main(_kernel("output", tmp_path))
    captured = capsys.readouterr()
    assert not _raw_in(captured.out, captured.err)
    return code, captured.out, captured.err


def _summary(**changes) -> bytes:
    return json.dumps({**SUMMARY_FIELDS, **changes}).encode()


FORMULAS = {
    "recipe": '=HYPERLINK("http://x","y")',
    "backbone": "@SUM(1)",
}
FORMULA_FIELDS = {
    "data_source": "+cmd|' /C calc'!A0",
    "data_fingerprint": "-2+3",
    "petals_commit": "\t=1+1",
}
COLUMN = {"petals_commit": "git_commit"}  # the summary's field -> the board's column, where they differ


def _nested(levels: int) -> object:
    value: object = 0
    for _ in range(levels):
        value = [value]
    return value


def test_formula_cells_from_a_summary_are_neutralised_and_numbers_stay_numbers(
    tmp_path, in_kaggle_env, capsys
):
    metrics = {**FORMULAS, "evaluation": {"val_macro_f1": 0.9, "val_accuracy": -0.25}, "epochs": 3}
    code, _, err = _output(tmp_path, capsys, _summary(metrics=metrics, **FORMULA_FIELDS))
    assert code == 0, err
    board = tmp_path / "subs" / "leaderboard-flowers.csv"
    row = next(csv.DictReader(board.open()))
    for name, value in {**FORMULAS, **FORMULA_FIELDS}.items():
        assert row[COLUMN.get(name, name)] == "'" + value, (name, row)
    assert row["val_accuracy"] == "-0.25" and row["epochs"] == "3"  # numbers, as numbers
    # read back, changed, written again: each cell quoted once, the numbers still numbers
    leaderboard.update(board, row["entry"], public_score=-1.5)
    again = next(csv.DictReader(board.open()))
    assert {k: again[k] for k in row} == {**row, "public_score": "-1.5"}
    table = leaderboard.read(board)
    assert table["val_accuracy"].iloc[0] == -0.25 and table["recipe"].iloc[0] == "'" + FORMULAS["recipe"]
    seen = ", ".join(f"{k} {again[k]}" for k in ("recipe", "backbone", "data_source", "data_fingerprint"))
    record(
        "leaderboard CSV: formula cells",
        f"{SUMMARY} with {json.dumps({**FORMULAS, **FORMULA_FIELDS})}",
        f"(no error) cells written {seen}",
        code,
        "a row whose text cells start with a quote; val_accuracy -0.25 a number",
    )


def test_escapes_in_summary_fields_are_shown_escaped_by_the_leaderboard(tmp_path, in_kaggle_env, capsys):
    metrics = {"backbone": ESCAPES, "recipe": "\x1b[31mred", "evaluation": {"val_macro_f1": 0.9}}
    code, _, err = _output(tmp_path, capsys, _summary(metrics=metrics))
    assert code == 0, err
    code = cli.main(["leaderboard", "--competition", "flowers", "--submissions-dir", str(tmp_path / "subs")])
    captured = capsys.readouterr()
    assert code == 0 and not _raw_in(captured.out, captured.err)
    line = next(line for line in captured.out.splitlines() if "kaggle-default-cnn-192-abc" in line)
    assert ESCAPES_SHOWN in line
    record("make leaderboard: escapes in a summary", f"{SUMMARY} backbone `{ESCAPES_SHOWN}`", line.strip(), 0,
           "the board and its plot")  # fmt: skip


@pytest.mark.parametrize(
    ("case", "summary", "expected"),
    [
        ("10,000 levels", b'{"a": ' * 10_000 + b"1" + b"}" * 10_000, "nested deeper than 32 levels"),
        ("40 levels", _summary(extra=_nested(40)), "nested deeper than 32 levels"),
        (
            "a list as backbone",
            _summary(metrics={"backbone": ["x"] * 3, "evaluation": {}}),
            "metrics.backbone \"['x', 'x', 'x']\" is not a text of at most 200 characters",
        ),
        ("a number as data_source", _summary(data_source=12), "data_source '12' is not a text of at most"),
        (
            "a long petals_commit",
            _summary(petals_commit="a" * 5000),
            f"petals_commit '{'a' * 55}...' (4,945 more characters) is not",
        ),
    ],
    ids=["deep", "forty", "list", "number", "long"],
)
def test_a_summary_of_the_wrong_shape_is_one_line(tmp_path, in_kaggle_env, capsys, case, summary, expected):
    output = _kernel_folder(tmp_path) / "output"
    tree = Tree(tmp_path, (output, tmp_path / "home"))
    code, _, err = _output(tmp_path, capsys, summary)
    line = one_error_line(err)
    assert code == 2 and SUMMARY in line and expected in line, line
    assert tree.changes() == [] and not (tmp_path / "subs").exists()
    record(
        f"kernel summary: {case}", f"{SUMMARY}: {case}", line, 2, "its download in output/; no leaderboard"
    )


def test_an_error_line_is_escaped_whatever_built_it(capsys):
    """The last guard: a PetalsError whose maker forgot to show a foreign value safely."""

    def stage() -> None:
        raise PetalsError(f"label {ESCAPES} is odd\nforged: all good")

    assert cli.run_stage("fetch", stage) == 2
    err = capsys.readouterr().err
    assert err == f"petals fetch: error: label {ESCAPES_SHOWN} is odd\\nforged: all good\n"


@pytest.mark.parametrize(
    ("case", "submission", "expected"),
    [
        (
            "a formula as ref",
            {"ref": '=HYPERLINK("http://x","y")'},
            'submission 1 has ref \'=HYPERLINK("http://x","y")\', not a whole number',
        ),
        ("a list as ref", {"ref": [1, 2]}, "submission 1 has ref '[1, 2]', not a whole number"),
        (
            "a number as description",
            {"ref": 1001, "description": 7},
            "submission 1 has description '7', not text",
        ),
        (
            "an object as fileName",
            {"ref": 1001, "fileName": {"a": 1}},
            "submission 1 has fileName \"{'a': 1}\", not text",
        ),
    ],
)
def test_a_submission_list_of_the_wrong_shape_is_one_line(
    tmp_path, in_kaggle_env, capsys, case, submission, expected
):
    """The client reads the list's scalars untyped: a ref, file name or description of another type
    is one line naming it, before any row is matched or written."""
    subs = tmp_path / "subs"
    board = leaderboard.board_file(subs, "flowers")
    leaderboard.update(board, "run-a", kind="run", submission_ref="1001")
    tree = Tree(tmp_path, (tmp_path / "home",))
    with KaggleTestServer(Behaviour(submissions=[{"status": "COMPLETE", **submission}])):
        code = cli.main(["leaderboard", "--sync", "--competition", "flowers", "--submissions-dir", str(subs)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert f"Kaggle's list of your submissions to 'tpu-getting-started': {expected}" in line, line
    assert tree.changes() == []
    record(f"leaderboard-sync: {case}", f"ListSubmissions answers {json.dumps(submission)}", line, 2,
           "board untouched")  # fmt: skip


@pytest.mark.parametrize(
    ("field", "answer"), [("log", {"kernel_log": ["a"]}), ("nextPageToken", {"kernel_page_token": {"x": 1}})]
)
def test_an_output_listing_of_the_wrong_shape_is_one_line(tmp_path, in_kaggle_env, capsys, field, answer):
    _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (tmp_path / "home",))
    with KaggleTestServer(Behaviour(kernel_files={SUMMARY: _summary()}, **answer)):
        code = cli.main(_kernel("output", tmp_path))
    line = one_error_line(capsys.readouterr().err)
    value = quoted(next(iter(answer.values())))
    assert code == 2
    assert f"kernel {KERNEL}: Kaggle's listing of its outputs has {field} {value}, not text" in line, line
    assert tree.changes() == [] and not (tmp_path / "kernels" / "petals-tiny" / "output").exists()
    record(f"kernel output: {field} not text", f"ListKernelSessionOutput's {field} {value}", line, 2,
           "nothing written")  # fmt: skip


def test_class_names_in_the_per_class_tables_cannot_start_a_formula(tmp_path):
    """evaluate's per_class.csv and confusions.csv carry the competition's class names."""
    import dataclasses

    from competition import load_spec
    from pipeline.core.rundir import RunDir
    from pipeline.tasks.targets import single_label_report

    spec = dataclasses.replace(load_spec("dogs-vs-cats"), classes=("=cmd|' /C calc'!A0", "\x1b[31mdog"))
    labels = np.array([0, 1, 1, 0])
    probabilities = np.array([[0.2, 0.8], [0.9, 0.1], [0.3, 0.7], [0.6, 0.4]])
    result = single_label_report.evaluation(labels, probabilities, spec)
    for name in (RunDir.PER_CLASS, RunDir.CONFUSIONS):
        result.files[name](tmp_path / name)
    per_class = list(csv.DictReader((tmp_path / RunDir.PER_CLASS).open()))
    assert [row["class"] for row in per_class] == ["'=cmd|' /C calc'!A0", "\x1b[31mdog"]
    confusions = list(csv.DictReader((tmp_path / RunDir.CONFUSIONS).open()))
    assert {row["true"] for row in confusions} == {"'=cmd|' /C calc'!A0", "\x1b[31mdog"}
    lines = "\n".join(single_label_report.summary_lines(result.fields))
    assert not _raw_in(lines) and "\\x1b[31mdog" in lines and "=cmd|' /C calc'!A0" in lines


def test_a_regressions_column_names_in_its_table_and_lines_cannot_start_a_formula_or_act(tmp_path):
    """Several numbers a row (Feedback Prize ELL): the columns' names come from the competition file
    (a shared one says anything) into evaluate's per_class.csv, its lines and submit's description."""
    import dataclasses

    from competition import load_spec
    from pipeline.core.rundir import RunDir
    from pipeline.tasks.competitions import task_of
    from pipeline.tasks.targets import regression_report

    names = ("=cmd|' /C calc'!A0", "\x1b]0;OWNED\x07cohesion")
    spec = load_spec("feedback-prize-ell")
    spec = dataclasses.replace(spec, classes=names, submission_columns=names)
    rng = np.random.default_rng(0)
    true = rng.uniform(1, 5, (6, 2)).astype(np.float32)
    result = regression_report.evaluation(true, true + rng.normal(0, 0.3, true.shape), spec)
    result.files[RunDir.PER_CLASS](tmp_path / RunDir.PER_CLASS)
    table = list(csv.DictReader((tmp_path / RunDir.PER_CLASS).open()))
    assert [row["name"] for row in table] == ["'=cmd|' /C calc'!A0", names[1]]
    lines = "\n".join(regression_report.summary_lines(result.fields))
    described = task_of(spec).describe_submission(spec, None)
    for said in (lines, described):
        assert not _raw_in(said) and "\\x1b]0;OWNED\\x07cohesion" in said, said


def test_a_logged_line_quoting_a_foreign_value_reaches_the_terminal_escaped():
    """A log line names files and Kaggle's words: its escapes are shown, not acted on."""
    import logging

    from pipeline.cli import _Shown

    quoted = ("\x1b]0;pwned\x07\u202eevil\nFAKE: petals ok",)  # a newline would forge a second line
    record = logging.LogRecord("pipeline", logging.INFO, __file__, 1, "fetch: %s", quoted, None)
    line = _Shown("%(message)s").format(record)
    assert line == "fetch: \\x1b]0;pwned\\x07\\u202eevil\\nFAKE: petals ok"
    assert not any(c in line for c in RAW)


@pytest.mark.parametrize(
    "finished",
    ["2026-11-27T10:00:00Z\x1b]0;OWNED\x07", "\x1b[2J", "yesterday"],
    ids=["osc", "clear", "words"],
)
def test_a_fold_runs_time_that_is_no_time_is_refused_in_one_line(tmp_path, finished):
    """`make kernel-output` prints when each fold finished, as the kernel's summary says: an ISO time
    (or nothing) passes, anything else (an escape sequence a terminal acts on) is one line."""
    import json

    from pipeline.core.errors import PetalsError
    from pipeline.kernels.client.metadata import read_folds_summary

    path = tmp_path / "petals_summary.json"
    written = {"folds": 2, "fold_list": [0], "tta": 1, "fold_runs": {"cpu-run-fold0": "2026-11-27T10:00:00Z"}}
    path.write_text(json.dumps(written))
    assert read_folds_summary(path, "me/k")["fold_runs"] == written["fold_runs"]
    written["fold_runs"]["cpu-run-fold0"] = finished
    path.write_text(json.dumps(written))
    with pytest.raises(PetalsError, match=r"fold_runs.cpu-run-fold0 .* is not a time") as refused:
        read_folds_summary(path, "me/k")
    assert not _raw_in(str(refused.value))


def test_a_fold_trained_on_other_data_is_named_with_its_origin_escaped():
    """A kernel's fold run carries the data manifest it trained on; `make kernel-output` says where
    a fold it will not merge came from, in the manifest's words: escaped, never acted on."""
    from types import SimpleNamespace

    from pipeline.core.config import Config
    from pipeline.cv.merge import foreign_data

    run = SimpleNamespace(
        name="cpu-run-fold0",
        trained_on=lambda: {
            "origin": "kaggle\x1b]0;OWNED\x07\x1b[2J",
            "labelled_fingerprint": "sha256:\x1b[31mx",
        },
        read_config=Config,
    )
    said = foreign_data(run, "sha256:ours", None)
    assert said.startswith("run (cpu-run-fold0): trained on kaggle\\x1b]0;OWNED\\x07") and not _raw_in(said)


def test_a_compared_runs_name_from_a_shared_folder_is_shown_escaped():
    """`make compare` prints run names, and runs folders get shared: a name's escapes stay text."""
    from pipeline.cv.compare import Comparison

    found = Comparison((f"run{ESCAPES}", "b"), "macro-F1", 10, None, (0.5, 0.6), 0.1, 0.05, (0.0, 0.2), 1)
    line = found.line()
    assert not any(raw in line for raw in RAW) and "\n" not in line
    assert line.startswith(f"macro-F1 on 10 rows both held out: run{ESCAPES_SHOWN} 0.5000, b 0.6000")
