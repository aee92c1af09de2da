"""Hostile input: competition files and label CSVs are untrusted (issue 42, part A).

A competition file a user wrote or was sent (`--competition path/to/x.toml`) names files that
petals joins onto the data dir, the source and its own folders; a label CSV from a download names
images. Each case below changes one field of a shipped competition file (or one row of a label
CSV) and drives the command line: the one line the user sees, exit 2, and nothing written
anywhere (a Tree snapshot of a fake checkout and source around the data dir).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from competition.spec import SPEC_DIR
from pipeline import cli
from pipeline.core.errors import PetalsError
from pipeline.core.paths import SHOWN
from pipeline.formats.base import format_of
from tests.conftest import run_cli
from tests.hostile import Tree, one_error_line, record


def _jpeg(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(path)


def _competition(folder: Path, base: str, old: str = "", new: str = "") -> Path:
    """A copy of `competition/<base>/` in `folder` with `old` replaced by `new` in its file."""
    text = (SPEC_DIR / base / "competition.toml").read_text()
    assert old in text, old
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "classes.txt").write_text((SPEC_DIR / base / "classes.txt").read_text())
    path = folder / "evil.toml"
    path.write_text(text.replace(old, new, 1))
    return path


class World:
    """A fake checkout (its Makefile, its data dir) and a source folder of the competition's files
    with a decoy `../Makefile` beside it: what `make fetch SOURCE=dir` would copy from."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path / "world"
        self.source, self.checkout = self.root / "source", self.root / "checkout"
        self.data = self.checkout / "data"
        _jpeg(self.source / "train_images" / "1.jpg")
        _jpeg(self.source / "train_images" / "2.jpg")
        _jpeg(self.source / "test_images" / "3.jpg")
        (self.source / "train.csv").write_text("image_id,label\n1.jpg,0\n2.jpg,1\n")
        (self.source / "sample_submission.csv").write_text("image_id,label\n3.jpg,4\n")
        (self.root / "Makefile").write_text("all:\n\techo the attacker's Makefile\n")
        self.checkout.mkdir(parents=True)
        (self.checkout / "Makefile").write_text("all:\n\techo the checkout's own Makefile\n")
        # The stage may make its data dir and its work folders; nothing else.
        work = [self.data.with_name(self.data.name + s) for s in ("", ".partial", ".old", ".download")]
        self.tree = Tree(self.root, allowed=tuple(work))

    def write(self, name: str, text: str) -> None:
        """A source file made hostile before the stage runs (the snapshot taken again)."""
        (self.source / name).write_text(text)
        self.tree = Tree(self.tree.root, self.tree.allowed)

    def fetch_args(self, competition: Path | str) -> list[str]:
        source = ["--source", "dir", "--from", str(self.source)]
        return ["fetch", "--competition", str(competition), *source, "--data-dir", str(self.data)]

    def untouched(self) -> None:
        assert self.tree.changes() == []
        assert not self.data.exists()


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def _fetch_in_process(world: World, competition: Path, capsys) -> tuple[int, str]:
    """`python -m pipeline fetch ...` without a new process: the same parser and one-line errors."""
    code = cli.main(world.fetch_args(competition))
    return code, one_error_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- through a process


@pytest.mark.slow  # the fetch stage's process
def test_a_sample_submission_of_dotdot_makefile_copies_nothing_over_the_checkout(world, tmp_path):
    evil = _competition(
        tmp_path / "comp", "cassava", 'sample_submission = "sample_submission.csv"',
        'sample_submission = "../Makefile"',
    )  # fmt: skip
    makefile = (world.checkout / "Makefile").read_text()
    result = run_cli(*world.fetch_args(evil))
    line = one_error_line(result.stderr)
    assert "[data] sample_submission '../Makefile' leaves its folder" in line
    assert result.returncode == 2
    world.untouched()
    assert (world.checkout / "Makefile").read_text() == makefile
    record("spec: sample_submission", 'sample_submission = "../Makefile", SOURCE=dir', line, 2,
           "nothing written; the checkout's Makefile untouched")  # fmt: skip


# ----------------------------------------------------------------------------- in this process
# The same parser and one-line errors as `python -m pipeline`, without a new process's imports.


def test_a_labels_csv_of_etc_passwd_is_refused_without_printing_it(world, tmp_path, capsys):
    evil = _competition(tmp_path / "comp", "cassava", 'labels = "train.csv"', 'labels = "/etc/passwd"')
    code = cli.main(world.fetch_args(evil))
    stderr = capsys.readouterr().err
    line = one_error_line(stderr)
    assert "[data.image_csv.train] labels '/etc/passwd' leaves its folder" in line
    assert code == 2 and "root:" not in stderr
    world.untouched()
    record("spec: image_csv labels", 'labels = "/etc/passwd"', line, 2, "nothing read or written")


def test_a_competition_name_with_dotdot_makes_no_board_outside_submissions(tmp_path, capsys):
    evil = _competition(tmp_path / "comp", "flowers", 'name = "flowers"', 'name = "x/../../outside/pwn"')
    submissions = tmp_path / "world" / "submissions"
    submissions.mkdir(parents=True)
    tree = Tree(tmp_path / "world")
    code = cli.main(["leaderboard", "--competition", str(evil), "--submissions-dir", str(submissions)])
    line = one_error_line(capsys.readouterr().err)
    assert "name 'x/../../outside/pwn' is not a plain name" in line
    assert code == 2
    assert tree.changes() == []
    record("spec: name", 'name = "x/../../outside/pwn"', line, 2, "no board, lock or folder made")


def test_an_infinite_count_is_one_line_not_a_traceback(world, tmp_path, capsys):
    evil = _competition(tmp_path / "comp", "cassava", "train = 21397", "train = inf")
    code, line = _fetch_in_process(world, evil, capsys)
    assert "[data.counts] train = 'inf' is not a count (a whole number, 0 or more)" in line
    assert code == 2
    world.untouched()
    record("spec: counts inf", "[data.counts] train = inf", line, 2, "nothing written")


def test_a_label_csv_id_in_another_split_is_refused_naming_the_line(world, capsys):
    world.write("train.csv", "image_id,label\n1.jpg,0\n2.jpg,1\n../test_images/3.jpg,2\n")
    code, line = _fetch_in_process(world, "cassava", capsys)
    assert "train.csv: line 4 image_id '../test_images/3.jpg' leaves its folder" in line
    assert code == 2
    world.untouched()
    record("label CSV: id in another split", "train.csv row `../test_images/3.jpg,2`", line, 2,
           "data dir not made")  # fmt: skip


# ----------------------------------------------------------------------------- one field each

# (case, shipped competition, text replaced, replacement, what the line says)
FIELDS = [
    ("name", "cassava", 'name = "cassava"', 'name = "../cassava"', "name '../cassava' is not a plain name"),
    ("slugs", "cassava", 'slugs = ["cassava-leaf-disease-classification"]', 'slugs = ["../x"]',
     "slugs: '../x' is not a Kaggle slug"),
    ("sample_submission absolute", "cassava", 'sample_submission = "sample_submission.csv"',
     'sample_submission = "/etc/passwd"', "[data] sample_submission '/etc/passwd' leaves its folder"),
    ("classes_file /dev/zero", "cassava", 'metric = "accuracy"',
     'metric = "accuracy"\nclasses_file = "/dev/zero"', "classes_file '/dev/zero' leaves its folder"),
    ("splits", "cassava", 'splits = ["train", "test"]', 'splits = ["train", "../test"]',
     "[data] splits '../test' is not a plain name"),
    ("counts negative", "cassava", "train = 21397", "train = -5",
     "[data.counts] train = '-5' is not a count"),
    ("counts fraction", "cassava", "train = 21397", "train = 2.5",
     "[data.counts] train = '2.5' is not a count"),
    ("image_csv folder", "cassava", 'folder = "train_images"', 'folder = "../train_images"',
     "[data.image_csv.train] folder '../train_images' leaves its folder"),
    ("image_csv archive", "cassava", 'folder = "test_images"',
     'folder = "test_images"\narchive = "/tmp/t.zip"', "[data.image_csv.test] archive '/tmp/t.zip' leaves"),
    ("submission file", "cassava", 'file = "submission.csv"', 'file = "../../x.csv"',
     "[submission] file '../../x.csv' is not a plain name"),
    ("image_folder archive", "dogs-vs-cats", 'archive = "train.zip"', 'archive = "/tmp/train.zip"',
     "[data.image_folder.train] archive '/tmp/train.zip' leaves its folder"),
    ("image_folder members", "dogs-vs-cats", 'members = "test/{id}.jpg"', 'members = "../test/{id}.jpg"',
     "[data.image_folder.test] members '../test/{id}.jpg' leaves its folder"),
    ("image_folder members braces", "dogs-vs-cats", 'members = "test/{id}.jpg"',
     'members = "test/{id.__class__}.jpg"', "only {label}, {number} and {id} may stand in braces"),
    ("image_folder members twice", "dogs-vs-cats", 'members = "train/{label}.{number}.jpg"',
     'members = "train/{label}.{label}.jpg"', "members 'train/{label}.{label}.jpg': {label} stands twice"),
    ("table file", "imdb", 'file = "testData.tsv"', 'file = "../../testData.tsv"',
     "[data.table.test] file '../../testData.tsv' leaves its folder"),
    ("table archive", "imdb", 'archive = "testData.tsv.zip"', 'archive = "/tmp/testData.tsv.zip"',
     "[data.table.test] archive '/tmp/testData.tsv.zip' leaves its folder"),
    ("records record_dir", "flowers", 'record_dir = "tfrecords-jpeg-{size}x{size}"',
     'record_dir = "../tfrecords-{size}"', "[data.records] record_dir '../tfrecords-{size}' does not make"),
    ("records shard_name", "flowers", 'shard_name = "{index:02d}-{size}x{size}-{count}.tfrec"',
     'shard_name = "{index:999999999d}.tfrec"', "only {count}, {index}, {size} may stand in braces"),
    ("records resolutions", "flowers", "resolutions = [192, 224, 331, 512]", "resolutions = [inf]",
     "[data.records] resolutions 'inf' is not a whole number from 1 to 8192"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "base", "old", "new", "said"), FIELDS, ids=[f[0] for f in FIELDS])
def test_each_path_and_count_field_is_refused_where_the_file_is_loaded(
    world, tmp_path, capsys, case, base, old, new, said
):
    evil = _competition(tmp_path / "comp", base, old, new)
    code, line = _fetch_in_process(world, evil, capsys)
    assert said in line and line.startswith(f"petals fetch: error: competition={evil}: {evil}: ")
    assert code == 2
    world.untouched()
    record(f"spec: {case}", new.splitlines()[-1], line, code, "nothing written")


def test_a_competition_name_that_is_a_path_is_refused(world, capsys):
    """Only a path ending in .toml is read as one; a name is looked up under competition/."""
    code, line = _fetch_in_process(world, "../competition/flowers", capsys)
    assert "competition '../competition/flowers' is not a plain name" in line and code == 2
    world.untouched()
    record("spec: --competition ../x", "--competition ../competition/flowers", line, code, "nothing written")


# ----------------------------------------------------------------------------- the class list


def _classes_link(folder: Path) -> None:
    (folder / "classes.txt").unlink()
    (folder / "classes.txt").symlink_to("/dev/zero")


def _classes_fifo(folder: Path) -> None:
    (folder / "classes.txt").unlink()
    os.mkfifo(folder / "classes.txt")  # a read would wait for a writer forever


def _classes_huge(folder: Path) -> None:
    with open(folder / "classes.txt", "wb") as f:
        f.truncate(2**30)  # sparse: a GiB that takes no disk, refused by its size before a read


@pytest.mark.parametrize(
    ("make", "given", "said"),
    [
        (_classes_link, "classes.txt a link to /dev/zero", "classes_file 'classes.txt' leaves"),
        (_classes_fifo, "classes.txt a FIFO", "classes_file 'classes.txt' is not a regular file"),
        (_classes_huge, "classes.txt of 1 GiB", "classes_file 'classes.txt' is larger than 8388608 bytes"),
    ],
    ids=["link", "fifo", "huge"],
)
def test_a_class_list_that_is_not_a_small_file_is_refused_before_reading(
    world, tmp_path, capsys, make, given, said
):
    evil = _competition(tmp_path / "comp", "cassava")
    make(evil.parent)
    code, line = _fetch_in_process(world, evil, capsys)
    assert said in line and code == 2
    world.untouched()
    record(f"spec: classes_file ({given.split(' ', 1)[1]})", given, line, code, "not read; nothing written")


# ----------------------------------------------------------------------------- label CSV ids


def test_an_absolute_id_in_a_label_csv_is_refused(world, capsys):
    world.write("train.csv", "image_id,label\n1.jpg,0\n/etc/passwd,1\n")
    code, line = _fetch_in_process(world, "cassava", capsys)
    assert "train.csv: line 3 image_id '/etc/passwd' leaves its folder" in line and code == 2
    world.untouched()
    record("label CSV: absolute id", "train.csv row `/etc/passwd,1`", line, code, "data dir not made")


def test_a_label_csv_id_through_a_link_out_of_its_folder_is_refused(tmp_path):
    """Read in place (inspect, train): an id that names a link to a file outside the data dir."""
    from competition import load_spec

    spec, root = load_spec("cassava"), tmp_path / "data"
    _jpeg(tmp_path / "outside.jpg")
    _jpeg(root / "train_images" / "1.jpg")
    (root / "train_images" / "2.jpg").symlink_to(tmp_path / "outside.jpg")
    (root / "train.csv").write_text("image_id,label\n1.jpg,0\n2.jpg,1\n")
    tree = Tree(tmp_path)
    said = r"train\.csv: line 3 image_id '2\.jpg' leaves .* \(a link out of it\)"
    with pytest.raises(PetalsError, match=said) as refused:
        format_of(spec).images(root, spec, "train")
    assert tree.changes() == []
    seen = str(refused.value)
    record("label CSV: id a link out", "train_images/2.jpg -> ../outside.jpg", seen, None, "nothing read")


def test_a_long_label_is_cut_short_in_the_line(world, capsys):
    world.write("train.csv", f"image_id,label\n1.jpg,0\n2.jpg,{'9' * 5000}\n")
    code, line = _fetch_in_process(world, "cassava", capsys)
    assert (
        "train.csv ('2.jpg'): label '9999" in line
        and "...' (4,945 more characters) is not a class id" in line
    )
    assert code == 2
    assert len(line) < 200 + len(str(world.source)) + SHOWN
    world.untouched()
    record("label CSV: a 5000-digit label", "train.csv row `2.jpg,999...`", line, code, "data dir not made")


# ----------------------------------------------------------------------------- the board's path


@pytest.mark.parametrize("name", ["x/../../outside/pwn", "/tmp/pwn", "..", ""])
def test_the_board_path_is_refused_for_a_name_that_is_not_plain(tmp_path, name):
    from pipeline.runs import leaderboard

    submissions = tmp_path / "submissions"
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError, match=r"^leaderboard: competition .* is not a plain name") as refused:
        leaderboard.update(leaderboard.board_file(submissions, name), "run-1", kind="run")
    assert tree.changes() == [] and not submissions.exists()
    record(f"leaderboard: name {name!r}", f"a summary's competition {name!r}",
           str(refused.value), None, "no board or lock written")  # fmt: skip


def test_a_plain_name_still_gets_its_board(tmp_path):
    from pipeline.runs import leaderboard

    board = leaderboard.board_file(tmp_path, "cassava")
    leaderboard.update(board, "run-1", kind="run")
    assert board == tmp_path / "leaderboard-cassava.csv" and board.is_file()
