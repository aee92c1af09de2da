"""The offline leaderboard: concurrent writers lose nothing, ranking, the plot, syncing public scores."""

from __future__ import annotations

import multiprocessing

import pytest

from pipeline.runs import board_plot, leaderboard
from tests.conftest import run_cli
from tests.kaggle_server import Behaviour, KaggleTestServer


def _write_many(board, worker: int, rows: int, start) -> None:
    start.wait()  # every process starts writing at the same moment
    for i in range(rows):
        leaderboard.update(board, f"run-{worker}-{i}", kind="run", val_macro_f1=worker / 10 + i / 1000)
        leaderboard.update(board, "shared", **{("recipe" if worker % 2 else "backbone"): f"w{worker}"})


def test_concurrent_writers_lose_nothing(tmp_path):
    board = tmp_path / "submissions" / leaderboard.BOARD
    context = multiprocessing.get_context("fork")
    start = context.Barrier(6)
    workers = [context.Process(target=_write_many, args=(board, w, 15, start)) for w in range(6)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=120)
        assert process.exitcode == 0
    table = leaderboard.read(board)
    assert len(table) == 6 * 15 + 1 and table["entry"].is_unique
    shared = table.set_index("entry").loc["shared"]
    assert shared["recipe"].startswith("w") and shared["backbone"].startswith("w")  # both writers' fields
    assert not list(board.parent.glob("*.partial"))


def test_an_update_keeps_what_it_does_not_set_and_the_table_ranks_by_val_f1(tmp_path, spec):
    board = tmp_path / leaderboard.BOARD
    leaderboard.update(board, "a", kind="run", val_macro_f1=0.5, image_size=192, time="2026-11-01T00:00:00Z")
    leaderboard.update(board, "b", kind="ensemble", val_macro_f1=0.7, time="2026-11-02T00:00:00Z")
    leaderboard.update(board, "c", kind="run", time="2026-11-03T00:00:00Z")  # not evaluated yet
    leaderboard.update(board, "a", public_score=0.48)
    table = leaderboard.read(board)
    assert table.set_index("entry").loc["a", "val_macro_f1"] == 0.5
    shown = leaderboard.ranked(table, spec)
    assert shown["entry"].tolist() == ["b", "a", "c"] and shown["image_size"].tolist()[1] == 192
    board_plot.plot(table, tmp_path / "board.png", spec)
    assert (tmp_path / "board.png").stat().st_size > 5_000
    with pytest.raises(ValueError, match="unknown leaderboard column"):
        leaderboard.update(board, "a", score=1.0)


@pytest.mark.slow  # the leaderboard stage's process and the loopback server
def test_sync_pulls_public_scores_through_the_kaggle_client(tmp_path, kaggle_env):
    subs = tmp_path / "submissions"
    board = subs / leaderboard.BOARD
    leaderboard.update(board, "by-ref", kind="run", val_macro_f1=0.6, submission_ref="1001")
    leaderboard.update(board, "by-name", kind="run", val_macro_f1=0.5, submission=str(subs / "by-name.csv"))
    leaderboard.update(board, "by-message", kind="ensemble", val_macro_f1=0.7)
    leaderboard.update(board, "never-sent", kind="run", val_macro_f1=0.4)
    answers = [
        {"ref": 1001, "fileName": "x.csv", "publicScore": "0.61234", "status": "COMPLETE"},
        {"ref": 1002, "fileName": "by-name.csv", "publicScore": "0.5", "status": "COMPLETE"},
        {
            "ref": 1003,
            "fileName": "y.csv",
            "description": "petals by-message val-F1 0.7",
            "status": "PENDING",
        },
        {"ref": 1004, "fileName": "someone-else.csv", "publicScore": "0.9", "status": "COMPLETE"},
    ]
    behaviour = Behaviour(submissions=answers)
    with KaggleTestServer(behaviour):
        result = run_cli("leaderboard", "--sync", "--submissions-dir", str(subs), env=kaggle_env)
    assert result.returncode == 0, result.stderr
    assert behaviour.requests[0]["path"].endswith("CompetitionApiService/ListSubmissions")
    assert behaviour.requests[0]["json"]["competitionName"] == "tpu-getting-started"
    table = leaderboard.read(board).set_index("entry")
    assert table.loc["by-ref", "public_score"] == pytest.approx(0.61234)
    assert table.loc["by-name", "public_score"] == 0.5 and table.loc["by-name", "submission_ref"] == "1002"
    assert table.loc["by-message", "kaggle_status"] == "pending"
    assert str(table.loc["never-sent", "public_score"]) == "nan"
    assert "3 row(s) matched" in result.stderr and "by-ref" in result.stdout
    assert (subs / leaderboard.PLOT).is_file()
    assert "petals-key" not in result.stdout + result.stderr


def test_an_empty_leaderboard_says_how_to_fill_it(tmp_path):
    result = run_cli("leaderboard", "--submissions-dir", str(tmp_path))
    assert result.returncode == 2
    assert "no entries yet; `make evaluate` records a run" in result.stderr
    assert not list(tmp_path.iterdir())  # nothing was written


def test_defaults_fill_only_a_new_row(tmp_path):
    board = tmp_path / leaderboard.BOARD
    leaderboard.update(board, "evaluated", val_macro_f1=0.8)
    for entry in ("evaluated", "predicted-first"):
        leaderboard.update(board, entry, defaults={"val_macro_f1": 0.5}, submission=f"{entry}.csv")
    table = leaderboard.read(board).set_index("entry")
    assert (
        table.loc["evaluated", "val_macro_f1"] == 0.8 and table.loc["predicted-first", "val_macro_f1"] == 0.5
    )
    assert table["submission"].tolist() == ["evaluated.csv", "predicted-first.csv"]


@pytest.mark.parametrize(
    ("written", "says"),
    [("", "unreadable leaderboard"), ("entry\n" + "x" * (70 << 10) + "\n", "characters")],
)
def test_a_board_that_is_no_board_is_one_line(tmp_path, written, says):
    """A submissions folder gets shared and synced: an empty file (pandas' EmptyDataError), a cell of
    70 KB (read whole before) is one line naming the board."""
    from pipeline.core.errors import PetalsError

    board = tmp_path / leaderboard.BOARD
    board.write_text(written)
    with pytest.raises(PetalsError, match=f"{board}"):
        leaderboard.read(board)


def test_a_boards_odd_numbers_and_a_runs_odd_fields_print_as_no_number(tmp_path):
    """A hand-edited board (an image size of 1.5, inf folds) and a run from a kernel's output whose
    metrics.json says anything still print: what is not a whole number shows as none."""
    import json

    from competition import load_spec
    from pipeline.core.rundir import RunDir

    spec = load_spec("flowers")
    board = tmp_path / leaderboard.BOARD
    board.write_text("entry,kind,image_size,epochs,cv_score,folds,val_macro_f1\na,cv,1.5,inf,0.6,inf,0.6\n")
    shown = leaderboard.ranked(leaderboard.read(board), spec)
    assert (shown.loc[0, "judged"], shown.loc[0, "image_size"], shown.loc[0, "epochs"]) == ("CV", "", "")
    run = RunDir(tmp_path / "runs" / "r")
    run.path.mkdir(parents=True)
    (run.path / RunDir.METRICS).write_text(json.dumps(
        {"train_seconds": "12; rm -rf", "epochs": "3 epochs", "image_size": 1e300, "recipe": "\x1b[2J" * 100}
    ))  # fmt: skip
    fields = leaderboard.run_fields(run)
    assert fields["train_seconds"] is None and fields["epochs"] is None and fields["image_size"] is None
    assert "\x1b" not in fields["recipe"] and len(fields["recipe"]) < 300
