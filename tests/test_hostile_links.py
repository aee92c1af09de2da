"""Hostile input, round two: links and odd files in a folder petals does not own (issue 64).

A competition folder gets shared (`COMPETITION=/x/shared/competition.toml`), and with it its
recipes, search spaces, candidates and class list. Every one of them is read by one rule
(pipeline/core/foreign_files.py): inside its folder once links are resolved, a regular file, at most a
MiB, checked before it is opened; TOML nested past 32 levels and a table where a string belongs
are one line too. Each case drives the command line in this process (the same parser and one-line
errors as `python -m pipeline`) and asserts the line, exit 2 and that nothing changed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from competition.spec import SPEC_DIR
from pipeline import cli
from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_toml, read_small_text
from pipeline.tasks.competitions import load_competition
from tests.hostile import Tree, one_error_line, record

SECRET = "KAGGLE_KEY=0123456789abcdef0123456789abcdef"  # what a private file outside holds
DEEP = 20_000  # levels of nesting: tomllib's recursion would give a 3,000-line traceback


class Shared:
    """A competition folder as someone shares it (flowers' file, named `shared`), beside a private
    file of the user's that a link in it points at."""

    def __init__(self, tmp_path: Path):
        self.root, self.folder = tmp_path, tmp_path / "shared"
        self.recipes = self.folder / "recipes"
        self.recipes.mkdir(parents=True)
        text = (SPEC_DIR / "flowers" / "competition.toml").read_text()
        self.spec = self.folder / "competition.toml"
        self.spec.write_text(text.replace('name = "flowers"', 'name = "shared"', 1))
        (self.folder / "classes.txt").write_text((SPEC_DIR / "flowers" / "classes.txt").read_text())
        (self.recipes / "mine.toml").write_text("[train]\nepochs = 2\n")
        self.private = tmp_path / "home" / "kaggle.toml"
        self.private.parent.mkdir()
        self.private.write_text(f'key = "{SECRET}"\n')

    def edit(self, old: str, new: str) -> None:
        text = self.spec.read_text()
        assert old in text, old
        self.spec.write_text(text.replace(old, new, 1))

    def kernel(self, capsys, *args: str) -> tuple[int, str, str]:
        """`make kernel COMPETITION=<its file> ...` in this process: the exit code, the one error
        line and everything printed."""
        code = cli.main(["kernel", "generate", "--kernels-dir", str(self.root / "kernels"), "--owner", "me",
                         "--set", f"competition={self.spec}", "--name", "shared-kernel", *args])  # fmt: skip
        printed = capsys.readouterr()
        return code, one_error_line(printed.err), printed.out + printed.err


@pytest.fixture
def shared(tmp_path):
    return Shared(tmp_path)


def _refused_kernel(shared: Shared, capsys, recipe: str, allowed: tuple[Path, ...] = ()) -> tuple[int, str]:
    """The kernel generation refused: its code and line; no kernel folder made, nothing changed,
    the private file's bytes printed nowhere."""
    tree = Tree(shared.root, allowed)
    code, line, printed = shared.kernel(capsys, "--recipe", recipe)
    assert code == 2
    assert tree.changes() == [] and not (shared.root / "kernels").exists()
    assert SECRET not in printed
    return code, line


# ----------------------------------------------------------------------------- links in recipes/


def test_a_recipe_link_out_of_a_shared_competition_is_never_bundled(shared, capsys):
    """The bundle carries an outside competition's recipes/*.toml: a link there to a private file
    was shipped in the kernel's script; now it is refused, whichever recipe the kernel runs."""
    (shared.recipes / "evil.toml").symlink_to(shared.private)
    code, line = _refused_kernel(shared, capsys, "default")
    assert f"recipe 'recipes/evil.toml' leaves {shared.folder} (a link out of it)" in line
    given = "COMPETITION=/x/shared/competition.toml, recipes/evil.toml -> ~/kaggle.toml"
    record("links: recipe link out, make kernel", given, line, code, "no kernel folder; the file not read")


@pytest.mark.parametrize(
    ("name", "target", "said"),
    [
        ("zero", "/dev/zero", "recipe 'zero.toml' leaves {recipes} (a link out of it)"),
        ("environ", "/proc/self/environ", "recipe 'environ.toml' leaves {recipes} (a link out of it)"),
        ("loop", "loop.toml", "recipe 'loop.toml' cannot be resolved (a loop of links)"),
    ],
    ids=["dev-zero", "proc", "loop"],
)
def test_a_recipe_link_to_a_device_or_proc_is_refused_before_reading(shared, capsys, name, target, said):
    (shared.recipes / f"{name}.toml").symlink_to(target)
    code, line = _refused_kernel(shared, capsys, name)
    assert said.format(recipes=shared.recipes) in line
    assert "PATH=" not in line  # /proc/self/environ's content
    record(f"links: recipe link to {target}", f"recipes/{name}.toml -> {target}, RECIPE={name}", line, code,
           "nothing read or written")  # fmt: skip


def test_a_fifo_recipe_is_refused_not_waited_on(shared, capsys):
    os.mkfifo(shared.recipes / "fifo.toml")  # a read would wait for a writer forever
    code, line = _refused_kernel(shared, capsys, "fifo")
    assert f"{shared.recipes}: recipe 'fifo.toml' is not a regular file" in line
    record("links: recipe a FIFO", "recipes/fifo.toml a FIFO, RECIPE=fifo", line, code, "not opened")


def test_a_recipe_of_a_gibibyte_is_refused_before_reading(shared, capsys):
    big = shared.recipes / "big.toml"
    with open(big, "wb") as f:
        f.truncate(2**30)  # sparse: no disk, and no read of it either
    code, line = _refused_kernel(shared, capsys, "big", allowed=(big,))  # the Tree would read it
    assert f"{shared.recipes}: recipe 'big.toml' is larger than 1048576 bytes" in line
    assert big.stat().st_size == 2**30
    record("links: recipe of 1 GiB", "recipes/big.toml, 1 GiB (sparse), RECIPE=big", line, code,
           "not read (was 2.9 GB RSS)")  # fmt: skip


def test_a_proc_file_read_in_place_stops_at_the_bound():
    """A /proc file is regular with a size of 0: its stat passes, and the read stops at the bound."""
    with pytest.raises(PetalsError) as refused:
        read_small_text(Path("/proc/self"), "environ", "recipe", "/proc/self", limit=16)
    line = str(refused.value)
    assert line == "/proc/self: recipe 'environ' is larger than 16 bytes"
    record("links: a /proc file in place", "a folder in /proc, its environ (stat size 0), a 16-byte bound",
           line, None, "17 bytes read, none kept")  # fmt: skip


def test_a_folder_swapped_for_a_link_after_the_check_is_caught_where_the_file_is_opened(shared, monkeypatch):
    """A race on a shared disk: recipes/ checked, then swapped for a link to the user's home before
    the file is opened. The open file's real place (Linux's /proc/self/fd) is checked again."""
    from pipeline.core import foreign_files

    (shared.private.parent / "mine.toml").write_text(f'key = "{SECRET}"\n')
    checked = foreign_files.inside

    def swapped_after(folder, value, field, source=None):
        path = checked(folder, value, field, source)
        shared.recipes.rename(shared.folder / "recipes.old")
        shared.recipes.symlink_to(shared.private.parent)
        return path

    monkeypatch.setattr(foreign_files, "inside", swapped_after)
    with pytest.raises(PetalsError) as refused:
        read_small_text(shared.folder, "recipes/mine.toml", "recipe", shared.folder)
    line = str(refused.value)
    assert line == f"{shared.folder}: recipe 'recipes/mine.toml' changed while it was read"
    record("links: recipes/ swapped for a link mid-read", "recipes/ checked, then -> ~ before the open",
           line, None, "opened, not read")  # fmt: skip


# ----------------------------------------------------------------------------- beside the recipes


def test_a_search_space_link_out_is_refused(shared, capsys):
    (shared.recipes / "spaces").mkdir()
    (shared.recipes / "spaces" / "mine.toml").symlink_to(shared.private)
    tree = Tree(shared.root)
    code = cli.main(["sweep", "--set", f"competition={shared.spec}", "--recipe", "mine", "--space", "1",
                     "--trials", "1", "--runs-dir", str(shared.root / "runs")])  # fmt: skip
    printed = capsys.readouterr()
    line = one_error_line(printed.err)
    assert code == 2
    assert f"search space 'spaces/mine.toml' leaves {shared.recipes} (a link out of it)" in line
    assert tree.changes() == [] and SECRET not in printed.out + printed.err
    record("links: search space link out", "recipes/spaces/mine.toml -> ~/kaggle.toml, make sweep SPACE=1",
           line, code, "no study, no run")  # fmt: skip


def test_a_candidates_link_out_is_refused(shared):
    from pipeline.cv import choose

    (shared.recipes / "candidates").mkdir()
    (shared.recipes / "candidates" / "mine.toml").symlink_to(shared.private)
    tree = Tree(shared.root)
    with pytest.raises(PetalsError) as refused:
        choose.read_candidates(
            *choose.candidates_file("1", load_competition(str(shared.spec)), "mine", "mine")
        )
    line = str(refused.value)
    assert line == f"candidates file 'candidates/mine.toml' leaves {shared.recipes} (a link out of it)"
    assert tree.changes() == []
    record("links: candidates link out", "recipes/candidates/mine.toml -> ~/kaggle.toml, CHOOSE=1", line,
           None, "nothing read")  # fmt: skip


def test_a_class_list_link_out_is_refused_and_never_bundled(shared, capsys):
    shared.edit('metric = "macro_f1"', 'metric = "macro_f1"\nclasses_file = "labels.txt"')
    (shared.folder / "labels.txt").symlink_to(shared.private)
    code, line = _refused_kernel(shared, capsys, "default")
    assert f"{shared.spec}: classes_file 'labels.txt' leaves {shared.folder} (a link out of it)" in line
    record("links: classes_file link out", 'classes_file = "labels.txt" -> ~/kaggle.toml, make kernel',
           line, code, "no kernel folder; the file not read")  # fmt: skip


# ----------------------------------------------------------------------------- the competition file


def _leaderboard(shared: Shared, capsys) -> tuple[int, str]:
    """A stage that loads the competition and nothing else, in this process."""
    tree = Tree(shared.root)
    code = cli.main(["leaderboard", "--competition", str(shared.spec),
                     "--submissions-dir", str(shared.root / "submissions")])  # fmt: skip
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and tree.changes() == []
    return code, line


@pytest.mark.parametrize(
    ("case", "nested"),
    [
        ("arrays", "deep = " + "[" * DEEP + "]" * DEEP),  # tomllib recurses per level
        ("dotted table", "[" + ".".join(["a"] * DEEP) + "]"),  # no recursion, but a 20,000-deep table
        ("dotted key", ".".join(["a"] * DEEP) + " = 1"),  # tomllib's time: the parts squared
    ],
)
def test_a_competition_file_nested_20000_deep_is_one_line(shared, capsys, case, nested):
    shared.spec.write_text(f"{nested}\n{shared.spec.read_text()}")
    code, line = _leaderboard(shared, capsys)
    assert f"{shared.spec}: nested deeper than 32 levels of tables and arrays" in line
    record(f"links: competition file, {case} {DEEP} deep", f"{nested[:24]}... ({DEEP} levels)", line, code,
           "nothing written")  # fmt: skip


def test_dotted_text_in_strings_and_comments_is_not_nesting(tmp_path):
    """The dotted names looked for before parsing are outside strings and comments only."""
    dotted = ".".join(["a"] * 40)
    (tmp_path / "fine.toml").write_text(
        f'# {dotted}\nbasic = "{dotted} \\" {dotted}"\nliteral = \'{dotted}\'\n'
        f'lines = """\n{dotted}\n""{dotted}"""\nraw = \'\'\'\n{dotted}\n\'\'\'\n"{dotted}" = 1\n'
    )
    raw = load_toml(tmp_path, "fine.toml", "recipe")
    assert (
        raw["basic"] == f'{dotted} " {dotted}'
        and raw["lines"] == f'{dotted}\n""{dotted}'
        and raw[dotted] == 1
    )


TYPES = [
    ("[submission] id_column", 'id_column = "id"', "id_column = {a = 1}",
     "[submission] id_column \"{'a': 1}\" is not a string"),
    ("[submission] label_column", 'label_column = "label"', "label_column = 5",
     "[submission] label_column '5' is not a string"),
    ("[submission] value", 'value = "class"', "value = {x = 1}",
     "[submission] value \"{'x': 1}\" is not a string"),
    ("title", 'title = "Petals to the Metal', "title = [1]\nold_title = \"Petals to the Metal",
     "title '[1]' is not a string"),
    ("metric", 'metric = "macro_f1"', "metric = {a = 1}", "metric \"{'a': 1}\" is not a string"),
    ("keeps_label", "keeps_label = [", "keeps_label = [{a = 1}, ", "[augment] keeps_label \"[{'a': 1}, "),
]  # fmt: skip


@pytest.mark.parametrize(("case", "old", "new", "said"), TYPES, ids=[t[0] for t in TYPES])
def test_a_table_where_a_string_belongs_is_one_line_naming_the_key(shared, capsys, case, old, new, said):
    shared.edit(old, new)
    code, line = _leaderboard(shared, capsys)
    assert f"{shared.spec}: {said}" in line
    record(f"links: spec {case} of the wrong type", new.splitlines()[0], line, code, "nothing written")


# A format's own table, read where the competition is loaded: (case, competition, old, new, line)
FORMAT_TYPES = [
    ("image_csv id_column", "cassava", 'id_column = "image_id"\nlabel_column = "label"\nlabels_are',
     'id_column = {a = 1}\nlabel_column = "label"\nlabels_are',
     "[data.image_csv.train] id_column \"{'a': 1}\" is not a string"),
    ("table separator", "imdb", 'separator = "\\t"', "separator = 9",
     "[data.table.train] separator '9' is not a string"),
    ("table text_columns", "imdb", 'text_columns = ["review"]', 'text_columns = "review"',
     "[data.table.train] text_columns 'review' is not a list of column names"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "base", "old", "new", "said"), FORMAT_TYPES, ids=[t[0] for t in FORMAT_TYPES]
)
def test_a_table_in_a_formats_table_is_one_line_naming_the_key(shared, capsys, case, base, old, new, said):
    """Was a TypeError in pandas at fetch (`unhashable type: 'dict'`), after the download."""
    text = (SPEC_DIR / base / "competition.toml").read_text()
    assert old in text, old
    shared.spec.write_text(text.replace(old, new, 1))
    (shared.folder / "classes.txt").write_text((SPEC_DIR / base / "classes.txt").read_text())
    code, line = _leaderboard(shared, capsys)
    assert f"{shared.spec}: {said}" in line
    record(f"links: spec {case} of the wrong type", new.splitlines()[0], line, code, "nothing written")


# ----------------------------------------------------------------------------- a run from a kernel
# `make kernel-output` brings a kernel's runs back (their config.json, metrics.json, history.csv):
# every JSON file of a run is read by the same rule, and nested past 32 levels is one line.


def _deep_json(path: Path) -> None:
    path.write_text('{"a": ' * 10_000 + "1" + "}" * 10_000)


def _huge_json(path: Path) -> None:
    with open(path, "wb") as f:  # sparse, and just past the bound: the case's snapshot hashes it
        f.truncate(17 * 2**20)


def _linked_json(path: Path) -> None:
    path.symlink_to(path.parents[2] / "home" / "private.json")


@pytest.mark.parametrize(
    ("make", "given", "said"),
    [
        (_deep_json, "metrics.json nested 10,000 deep", "metrics.json: nested deeper than 32 levels"),
        (_huge_json, "metrics.json of 17 MiB (sparse)", "run file 'metrics.json' is larger than 16777216"),
        (_linked_json, "metrics.json a link to ~/private.json", "run file 'metrics.json' leaves"),
    ],
    ids=["deep", "huge", "link"],
)  # fmt: skip
def test_a_run_file_from_a_kernels_output_is_read_by_the_rule(tmp_path, make, given, said):
    from pipeline.core.rundir import RunDir

    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "private.json").write_text('{"key": "' + SECRET + '"}')
    run = RunDir(tmp_path / "runs" / "kernel-run")
    run.path.mkdir(parents=True)
    make(run.path / "metrics.json")
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError) as refused:
        run.metrics()
    line = str(refused.value)
    assert said in line and SECRET not in line and "\n" not in line
    assert tree.changes() == []
    record(f"run file from a kernel ({given.split(' ', 1)[1]})", given, line, None, "nothing read or written")


@pytest.mark.parametrize(
    "listed",
    [
        [{"name": "HOME", "epoch": 1, "step": 0}, {"name": "../../keep.txt", "epoch": 2, "step": 0}],
        [{"name": "ckpt-1.npz", "epoch": 1, "step": 0, "sha256": "../../keep.txt"}],
        "ckpt-1.npz",
        [["ckpt-1.npz"]],
    ],
    ids=["paths", "bad-digest", "a-string", "a-list"],
)
def test_a_checkpoint_index_naming_files_outside_its_folder_deletes_and_reads_nothing_there(
    tmp_path, caplog, listed
):
    """A runs folder comes back from a kernel, or is shared: its checkpoint index (latest.json)
    lists the files the next save deletes. Names petals did not write (a path, `..`, not a
    `ckpt-N.npz`) are not taken: the checkpoint files in the folder are, and nothing outside goes."""
    import json

    import keras
    import numpy as np

    from pipeline.modeling.checkpoint import Checkpoint

    folder = tmp_path / "runs" / "shared-run" / "checkpoints"
    folder.mkdir(parents=True)
    (tmp_path / "home").mkdir()
    victim, sibling = tmp_path / "home" / "notes.txt", tmp_path / "runs" / "keep.txt"
    for path in (victim, sibling):
        path.write_text("mine")
    listed = json.loads(json.dumps(listed).replace("HOME", str(victim)))
    (folder / "latest.json").write_text(json.dumps({"latest": "ckpt-2.npz", "checkpoints": listed}))
    caplog.set_level("WARNING")
    weights = [keras.Variable(np.zeros(3, np.float32))]
    tree = Tree(tmp_path, allowed=(folder,))
    Checkpoint(folder, {"net": weights}, keep=1).save(3, 0.5)
    assert victim.read_text() == "mine" and sibling.read_text() == "mine" and tree.changes() == []
    assert "not a checkpoint index petals wrote; looking for checkpoint files instead" in caplog.text
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-3.npz", "latest.json"]
    weights[0].assign(np.ones(3, np.float32))
    assert Checkpoint(folder, {"net": weights}, keep=1).restore().epoch == 3
    np.testing.assert_array_equal(weights[0].numpy(), np.zeros(3))


def _fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize(
    "make",
    [lambda p: p.write_text("[1, 2]"), _deep_json, _fifo, lambda p: p.write_text('{"a": 1')],
    ids=["a-list", "deep", "fifo", "cut"],
)
def test_a_runs_config_and_a_data_manifest_that_are_no_json_object_are_one_line(tmp_path, make):
    """config.json comes back in a kernel's output, manifest.json in a shared data dir: each is read
    by the rule (never waited on, never a traceback), one line naming the file."""
    from pipeline.core.config import read_config
    from pipeline.data.manifest import read_manifest

    (tmp_path / "run").mkdir()
    make(tmp_path / "run" / "config.json")
    with pytest.raises(PetalsError) as refused:
        read_config(tmp_path / "run" / "config.json")
    assert "config.json" in str(refused.value) and "\n" not in str(refused.value)
    (tmp_path / "data").mkdir()
    make(tmp_path / "data" / "manifest.json")
    if make is _fifo:  # no file: no manifest (`make fetch` first), not waited on
        assert read_manifest(tmp_path / "data") is None
        return
    with pytest.raises(PetalsError, match=r"manifest.json.*: delete it and fetch again"):
        read_manifest(tmp_path / "data")


def test_a_manifest_whose_root_is_no_path_is_one_line(tmp_path):
    from pipeline.data.manifest import locate_data

    (tmp_path / "manifest.json").write_text('{"root": ["/etc"]}')
    with pytest.raises(PetalsError, match="its 'root' is not a path: delete it and fetch again"):
        locate_data(tmp_path)


@pytest.mark.parametrize(
    "make", [lambda p: p.write_text("[1]"), _deep_json, _fifo], ids=["a-list", "deep", "fifo"]
)
def test_a_submissions_record_or_intent_that_is_no_json_object_is_no_record(tmp_path, make):
    """A submissions folder may be shared: a CSV's record (x.json beside x.csv) or submit's intent
    file that is a list, 10,000 brackets or a FIFO is no record, read without waiting."""
    import threading

    from pipeline.runs import sent
    from pipeline.runs.submission_files import newest_submission, sidecar

    (tmp_path / "x.csv").write_text("id,label\n1,0\n")
    make(tmp_path / "x.json")
    make(tmp_path / "intent.json")
    found = {}

    def read():
        found["newest"] = newest_submission(tmp_path, "flowers")
        found["sidecar"] = sidecar(tmp_path / "x.csv", "0" * 64)
        found["intent"] = sent.read_intent(tmp_path / "intent.json", {"sha256": "0"})

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert not reader.is_alive(), "waited on a FIFO"
    assert found == {"newest": tmp_path / "x.csv", "sidecar": {}, "intent": {}}


def _npz(path: Path, arrays: dict, header: bytes | None = None) -> None:
    """An .npz of these arrays, or of one raw `header` (and 16 bytes) per name."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, value in arrays.items():
            if header is not None:
                archive.writestr(f"{name}.npy", header + b"\0" * 16)
                continue
            buffer = io.BytesIO()
            np.save(buffer, value)
            archive.writestr(f"{name}.npy", buffer.getvalue())


def _declaring_a_terabyte(path: Path) -> None:
    import io

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**6,) * 2}
    )
    _npz(path, dict.fromkeys(("ids", "probabilities", "tta", "source")), header.getvalue())


def _arrays(**changed):
    arrays = {"ids": np.array(["a", "b"]), "probabilities": np.zeros((2, 3), np.float32), "tta": np.array(1),
              "source": np.array("s")}  # fmt: skip
    return lambda path: _npz(path, {**arrays, **changed})


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (_declaring_a_terabyte, "declares 1,000,000,000,000 cells of float32 in 144 bytes"),
        (lambda p: p.write_bytes(b"PK\x03\x04 cut"), "unreadable predictions"),
        (_arrays(tta=np.array([1, 2])), "unreadable predictions"),
        (_arrays(tta=np.array(np.inf)), "unreadable predictions"),
        (
            _arrays(probabilities=np.zeros((3, 3))),
            "ids (2,) and probabilities (3, 3) disagree",
        ),
    ],
    ids=["terabyte", "cut", "tta-a-list", "tta-infinite", "rows"],
)
def test_predictions_from_a_kernels_output_are_bounded_before_they_are_read(tmp_path, make, said):
    """A kernel's run brings its predictions back (.npz): each array's size is read from its
    header and bounded before numpy allocates it, and a file of the wrong shape is one line."""
    from pipeline.modeling.inference import Predictions

    make(tmp_path / "val_predictions.npz")
    with pytest.raises(PetalsError) as refused:
        Predictions.load(tmp_path / "val_predictions.npz")
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_predictions_source_nested_100000_deep_is_one_line():
    from pipeline.cv.held import _source

    with pytest.raises(PetalsError, match=r"its source .* is not what predict writes; delete it"):
        _source("[" * 100_000, Path("val_predictions.npz"))


@pytest.mark.parametrize(
    "shape", ["a pipe", "a list", "deep", "a pid of 1e300", "a time past the year 9999", "a link out"]
)
def test_a_lock_file_of_any_shape_is_no_holder_and_is_taken_over(tmp_path, caplog, shape):
    """A writer's lock (`writer.lock` in a runs folder, `<data dir>.lock`) comes with a shared
    folder as anything at all: read as the foreign file it is, it is no holder, and is taken over
    with a line, not a traceback or a read that blocks forever."""
    import signal

    from pipeline.core import lock

    path, secret = tmp_path / "shared" / "data.lock", tmp_path / "home" / "private.json"
    path.parent.mkdir()
    secret.parent.mkdir()
    secret.write_text('{"pid": 1, "host": "elsewhere"}')  # pid 1 lives: as a lock, it would hold
    if shape == "a pipe":
        os.mkfifo(path)
    elif shape == "a link out":
        path.symlink_to(secret)
    else:
        written = {"a list": "[1]", "deep": "[" * 100_000, "a pid of 1e300": '{"pid": 1e300}',
                   "a time past the year 9999": '{"pid": 1073741824, "time": 1e300}'}  # fmt: skip
        path.write_text(written[shape])

    def blocked(*_):
        raise TimeoutError("the lock's read blocked")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(30)  # the old reader blocked on the pipe
    try:
        with lock.holding(path, "fetch"):
            assert json.loads(path.read_text())["pid"] == os.getpid()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not path.exists() and secret.is_file() and "taking over the lock" in caplog.text


def test_a_runs_data_fingerprint_that_is_not_text_is_none():
    """A run's data_manifest.json comes back in a kernel's output: a fingerprint of 7 was sliced."""
    from pipeline.core.rundir import data_identity

    assert data_identity({"labelled_fingerprint": 7}) == "" and data_identity({"fingerprint": "ab"}) == "ab"
