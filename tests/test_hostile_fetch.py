"""Fetch never deletes the user's data, and archives are a stranger's: a source that is, holds or lies
inside the data dir (or its work folders), a data dir holding someone else's files, a zip with links,
devices or bombs in it, a folder whose links lead out of it. Each is refused in one line, exit 2,
with nothing changed around it (a `Tree` snapshot of the test's folder).

The cases that show the command line end to end run `python -m pipeline` in a new process; the
others run the same stage in this process (cheaper: the code is the same).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import struct
import zipfile
from pathlib import Path

import pytest

from competition import load_spec
from pipeline import cli
from pipeline.core import files
from pipeline.core.errors import PetalsError
from pipeline.data import competition_files, embedded
from tests.conftest import run_cli
from tests.hostile import Tree, one_error_line, record
from tests.kaggle_server import Behaviour, KaggleTestServer

CATS = ["--competition", "dogs-vs-cats"]


def _fetch_here(capsys, *args: str) -> tuple[int, str]:
    """`petals fetch` in this process: its exit code and its one error line."""
    code = cli.main(["fetch", "--no-progress", *args])
    return code, one_error_line(capsys.readouterr().err)


def _user_files(folder: Path) -> Path:
    """A folder of someone's own files (not petals')."""
    (folder / "thesis").mkdir(parents=True)
    (folder / "thesis" / "chapter1.tex").write_text("years of work")
    (folder / "notes.txt").write_text("keep me")
    return folder


def _cats_folder(folder: Path) -> Path:
    """Enough of dogs-vs-cats for fetch to find it (verifying it would fail later, never reached)."""
    for split, image in (("train", "cat.0.jpg"), ("test", "1.jpg")):
        (folder / split).mkdir(parents=True)
        (folder / split / image).write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    (folder / "sample_submission.csv").write_text("id,label\n1,0.5\n")
    return folder


def _zip(path: Path, members: dict[str, bytes], kinds: dict[str, int] | None = None) -> Path:
    """A zip of these members; `kinds` gives some a Unix file type (a link, a pipe)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as opened:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2017, 3, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            if kinds and name in kinds:
                info.external_attr = (kinds[name] | 0o777) << 16
            opened.writestr(info, data)
    return path


def _declare(path: Path, size: int) -> Path:
    """`path`'s zip with every member's uncompressed size rewritten to `size` in its headers (the
    central directory's, which zipfile reads, and each local one), its bytes left as they are."""
    raw = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):
        at = raw.find(signature)
        while at != -1:
            struct.pack_into("<I", raw, at + offset, size)
            at = raw.find(signature, at + 4)
    path.write_bytes(bytes(raw))
    return path


def _assert_refused(code: int, line: str, says: str, tree: Tree) -> None:
    assert code == 2, line
    assert says in line, line
    assert tree.changes() == []


# ----------------------------------------------------------------------------- the data dir


def test_a_source_that_is_the_data_dir_is_refused_and_kept(tmp_path):
    mine = _user_files(_cats_folder(tmp_path / "mine"))
    tree = Tree(tmp_path)
    result = run_cli("fetch", *CATS, "--source", "dir", "--from", str(mine), "--data-dir", str(mine))
    line = one_error_line(result.stderr)
    _assert_refused(result.returncode, line, "overlap (--from is the data dir)", tree)
    assert (mine / "thesis" / "chapter1.tex").read_text() == "years of work"
    record("fetch: --from is the data dir", "`--from D --data-dir D`", line, 2, "your folder untouched")


@pytest.mark.parametrize(
    ("case", "layout", "says"),
    [
        ("source inside the data dir", ("data", "data/mine"), "overlap (--from lies inside the data dir)"),
        ("data dir inside the source", ("mine/data", "mine"), "overlap (the data dir lies inside --from)"),
        (
            "source is a work folder",
            ("data", "data.partial"),
            "overlap (--from is its work folder data.partial)",
        ),
        ("source inside the download folder", ("data", "data.download/x"), "lies inside its work folder"),
    ],
)
def test_a_source_overlapping_the_data_dir_is_refused(tmp_path, capsys, case, layout, says):
    data, given = (tmp_path / p for p in layout)
    _user_files(_cats_folder(given))
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--source", "dir", "--from", str(given), "--data-dir", str(data))
    _assert_refused(code, line, says, tree)
    record(f"fetch: {case}", f"`--from {layout[1]} --data-dir {layout[0]}`", line, 2, "nothing written")


def test_a_zip_inside_the_data_dir_is_refused(tmp_path, capsys):
    data = _user_files(tmp_path / "data")
    archive = _zip(data / "dogs-vs-cats.zip", {"sample_submission.csv": b"id,label\n"})
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(data))
    _assert_refused(code, line, "overlap (--from lies inside the data dir)", tree)
    record(
        "fetch: zip inside the data dir", "`--from D/comp.zip --data-dir D`", line, 2, "data dir untouched"
    )


@pytest.mark.parametrize("force", [False, True])
def test_a_data_dir_of_someone_elses_files_is_not_replaced(tmp_path, capsys, force):
    data = _user_files(tmp_path / "data")
    tree = Tree(tmp_path)
    extra = ["--force"] if force else []
    code, line = _fetch_here(capsys, *CATS, "--source", "synthetic", "--data-dir", str(data), *extra)
    _assert_refused(code, line, "holds files petals did not put there (no manifest.json)", tree)
    if force:
        record(
            "fetch: data dir not petals'",
            "`--data-dir D --force`, D your files",
            line,
            2,
            "data dir untouched",
        )


def test_a_data_dir_that_is_a_link_is_not_replaced(tmp_path, capsys):
    _user_files(tmp_path / "big-disk")
    (tmp_path / "data").symlink_to(tmp_path / "big-disk", target_is_directory=True)
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--source", "synthetic", "--data-dir", str(tmp_path / "data"))
    _assert_refused(
        code, line, "/data' is a link; fetch replaces the data dir: give the folder it points to", tree
    )
    record(
        "fetch: data dir is a link", "`--data-dir data -> big-disk/`", line, 2, "link and folder untouched"
    )


@pytest.mark.parametrize("folder", ["data.partial", "data.old"])
def test_a_work_folder_that_is_not_petals_is_not_deleted(tmp_path, capsys, folder):
    _user_files(tmp_path / folder)
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--source", "synthetic", "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, f"{folder}' is in fetch's way and is not a folder petals made", tree)
    record(f"fetch: foreign {folder}", f"`{folder}/` holds your files", line, 2, "nothing written")


def test_a_download_folder_that_is_not_petals_is_not_deleted(tmp_path, in_kaggle_env, capsys):
    work = tmp_path / "w"
    _user_files(work / "data.download")
    tree = Tree(work)
    code, line = _fetch_here(capsys, "--source", "kaggle", "--data-dir", str(work / "data"))
    _assert_refused(code, line, "data.download' is in fetch's way and is not a folder petals made", tree)
    record("fetch: foreign data.download", "`data.download/` holds your files", line, 2, "nothing written")


def test_unpacking_in_place_prunes_only_a_folder_petals_made(tmp_path):
    """The in-place unpack deletes what the competition does not need: only ever in fetch's staging."""
    mine = _user_files(_cats_folder(tmp_path / "mine"))
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError) as refused:
        competition_files.unpack_into(mine, mine, load_spec("dogs-vs-cats"))
    line = str(refused.value)
    assert line == f"{mine}: not a folder petals made; it will not unpack into it in place"
    assert tree.changes() == []
    record(
        "fetch: unpack in place, your folder", "`unpack_into(D, D)`, D yours", line, None, "folder untouched"
    )


def test_a_from_path_with_spaces_and_quotes_is_a_plain_value(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO)
    mine = tmp_path / "my \"cats\" & 'dogs' $HOME;"
    embedded.draw(load_spec("dogs-vs-cats"), mine, size=0, seed=1, scale=0.02)
    tree = Tree(tmp_path, (tmp_path / "data",))
    code = cli.main(
        ["fetch", "--no-progress", *CATS, "--from", str(mine), "--data-dir", str(tmp_path / "data")]
    )
    printed = capsys.readouterr().err
    assert code == 0, printed
    ready = next(line for line in caplog.messages if " ready: " in line)
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["origin"] == str(mine) and manifest["source"] == "dir"
    assert tree.changes() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", mine.name]  # no work folder left
    record("fetch: --from with quotes", "`--from 'my \"cats\" & ...;'`", ready, 0, "the data dir")


# ----------------------------------------------------------------------------- archives


def test_a_zip_with_a_symlink_member_is_refused(tmp_path, capsys):
    archive = _zip(
        tmp_path / "cats.zip",
        {"train": b"/etc", "train/cat.0.jpg": b"\xff\xd8", "sample_submission.csv": b"id,label\n"},
        {"train": stat.S_IFLNK},
    )
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, "cats.zip: member 'train' is a symbolic link", tree)
    record("fetch: zip with a symlink", "member `train -> /etc`", line, 2, "nothing written, your zip kept")


def test_a_zip_with_a_device_member_is_refused(tmp_path, capsys):
    archive = _zip(tmp_path / "cats.zip", {"train/pipe": b""}, {"train/pipe": stat.S_IFIFO})
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, "member 'train/pipe' is not a plain file or folder", tree)
    record("fetch: zip with a pipe", "member `train/pipe` (a FIFO)", line, 2, "nothing written")


def test_a_zip_declaring_terabytes_is_refused_before_unpacking(tmp_path, capsys):
    members = {f"train/cat.{i}.jpg": b"tiny" for i in range(20)}
    archive = _declare(_zip(tmp_path / "bomb.zip", members), 0xFFFFFFF0)  # 20 members, 4.3 GB each
    assert archive.stat().st_size < 5000
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, "bomb.zip: its members unpack to 85.9 GB or more, over the", tree)
    record("fetch: zip bomb (declared)", "4 kB zip declaring 86 GB", line, 2, "nothing written")


def test_a_nested_zip_inflating_past_the_bound_is_refused(tmp_path, capsys, monkeypatch):
    """A bomb one level down (the competition's zip holding `train.zip`) draws on the same bound;
    the bound is made small here so the test writes megabytes, not the real limit's gigabytes."""
    monkeypatch.setattr(files, "MAX_UNPACKED_BYTES", 1_000_000)
    inner = _zip(tmp_path / "train.zip", {"train/cat.0.jpg": b"\0" * 3_000_000})
    archive = _zip(
        tmp_path / "cats.zip",
        {"train.zip": inner.read_bytes(), "test/1.jpg": b"\xff\xd8", "sample_submission.csv": b"id,label\n"},
    )
    inner.unlink()
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(tmp_path / "data"))
    _assert_refused(
        code, line, "cats.zip/train.zip: its members unpack to 3.0 MB or more, over the 1.0 MB", tree
    )
    record(
        "fetch: nested zip bomb", "`train.zip` inside inflating past the bound", line, 2, "nothing written"
    )


def test_a_zip_understating_a_members_size_is_corrupt(tmp_path, capsys):
    """zipfile stops at the declared size, so a header that lies low ends in a CRC mismatch."""
    archive = _declare(_zip(tmp_path / "cats.zip", {"train/cat.0.jpg": b"\0" * 200_000}), 10)
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, f"corrupt archive {archive} (Bad CRC-32", tree)
    record(
        "fetch: zip understating sizes", "header says 10 B, inflates to 200 kB", line, 2, "nothing written"
    )


def test_too_many_members_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(files, "MAX_MEMBERS", 5)  # the real bound is a million files
    archive = _zip(tmp_path / "cats.zip", {f"train/cat.{i}.jpg": b"" for i in range(6)})
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, "cats.zip: over 5 members, more than petals unpacks in one fetch", tree)
    record("fetch: zip with too many files", "more members than the bound", line, 2, "nothing written")


def test_members_are_counted_before_zipfile_reads_them_and_not_by_the_end_records_word(
    tmp_path, capsys, monkeypatch
):
    """zipfile holds a record of every member as it opens (0.8 KB each): a directory of 20 million
    would fill memory before they could be counted. So the headers are counted first, and the end
    record's total (here rewritten to say 1) is not believed."""
    monkeypatch.setattr(files, "MAX_MEMBERS", 5)
    archive = _zip(tmp_path / "cats.zip", {f"train/cat.{i}.jpg": b"" for i in range(6)})
    raw = bytearray(archive.read_bytes())
    end = raw.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", raw, end + 8, 1, 1)  # entries on this disk, entries in all
    archive.write_bytes(bytes(raw))
    opened = []
    monkeypatch.setattr(files.zipfile, "ZipFile", lambda *a, **k: opened.append(a))
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, "cats.zip: over 5 members", tree)
    assert opened == []  # refused before zipfile parsed a record


@pytest.mark.parametrize(
    ("how", "member"), [("with ..", "../evil.txt"), ("absolute", "/tmp/petals-evil.txt")]
)
def test_a_zip_member_leaving_the_folder_is_refused(tmp_path, capsys, how, member):
    archive = _zip(tmp_path / "cats.zip", {member: b"pwned", "sample_submission.csv": b"id,label\n"})
    tree = Tree(tmp_path)
    data = tmp_path / "new" / "folders" / "data"  # folders made for the lock go with the refusal
    code, line = _fetch_here(capsys, *CATS, "--from", str(archive), "--data-dir", str(data))
    _assert_refused(code, line, f"corrupt archive {archive}: unsafe member path '{member}'", tree)
    assert not Path("/tmp/petals-evil.txt").exists()
    record(f"fetch: zip member {how}", f"`--from` zip, member `{member}`", line, 2, "nothing written")


def test_a_split_zip_in_your_folder_leaving_it_is_refused(tmp_path, capsys):
    mine = _cats_folder(tmp_path / "mine")
    for path in (mine / "train").iterdir():
        path.unlink()
    (mine / "train").rmdir()
    _zip(mine / "train.zip", {"../../evil.txt": b"pwned"})
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(mine), "--data-dir", str(tmp_path / "data"))
    _assert_refused(
        code, line, f"corrupt archive {mine / 'train.zip'}: unsafe member path '../../evil.txt'", tree
    )
    record(
        "fetch: dir source, split zip with ..",
        "`train.zip` member `../../evil.txt`",
        line,
        2,
        "nothing written",
    )


def test_a_refused_download_is_deleted_and_said(tmp_path, in_kaggle_env, capsys):
    archive = _zip(tmp_path / "served.zip", {"data": b"/etc", "data/x": b""}, {"data": stat.S_IFLNK})
    work = tmp_path / "w"
    work.mkdir()
    tree = Tree(work)
    with KaggleTestServer(Behaviour(archive=archive.read_bytes())):
        code, line = _fetch_here(capsys, "--source", "kaggle", "--data-dir", str(work / "data"))
    _assert_refused(code, line, "member 'data' is a symbolic link", tree)
    assert "data.download/tpu-getting-started.zip" in line and line.endswith("the download was deleted")
    record("fetch: refused Kaggle download", "served zip with a symlink", line, 2, "download deleted")


# ----------------------------------------------------------------------------- links in your folder


def _link_out(what: str):
    def make(mine: Path, outside: Path) -> None:
        if what == "file":
            (mine / "sample_submission.csv").unlink()
            (mine / "sample_submission.csv").symlink_to(outside / "secret.csv")
        elif what == "inner":
            (mine / "train" / "cat.0.jpg").unlink()
            (mine / "train" / "cat.0.jpg").symlink_to(outside / "secret.csv")
        else:
            for path in (mine / "train").iterdir():
                path.unlink()
            (mine / "train").rmdir()
            (mine / "train").symlink_to(outside, target_is_directory=True)

    return make


@pytest.mark.parametrize(
    ("what", "shows"),
    [("file", "sample_submission.csv"), ("inner", "train/cat.0.jpg"), ("folder", "train")],
)
def test_a_link_out_of_your_folder_is_not_followed(tmp_path, capsys, what, shows):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("root:x:0:0\n")
    mine = _cats_folder(tmp_path / "mine")
    _link_out(what)(mine, outside)
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(mine), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, f"{mine}: file '{shows}' leaves {mine} (a link out of it)", tree)
    record(f"fetch: link out ({what})", f"`{shows}` links outside --from", line, 2, "nothing written")


@pytest.mark.parametrize("where", ["sample_submission.csv", "train/cat.0.jpg"])
def test_a_pipe_in_your_folder_is_one_line_not_a_blocked_copy(tmp_path, capsys, where):
    """A FIFO would block the copy until someone writes to it (shutil raised SpecialFileError, a
    traceback); a device would never end."""
    mine = _cats_folder(tmp_path / "mine")
    (mine / where).unlink()
    os.mkfifo(mine / where)
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, *CATS, "--from", str(mine), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, f"{mine}: file '{where}' is not a plain file or folder", tree)
    record(f"fetch: a pipe in --from ({where})", f"`{where}` is a FIFO", line, 2, "nothing written")


@pytest.mark.parametrize("what", ["link out", "pipe", "dangling"])
def test_a_shard_folder_read_in_place_refuses_a_link_out_or_a_pipe(tmp_path, capsys, tiny_dataset, what):
    """TFRecord shards are read where they lie (not copied), so the check is at the listing: a shard
    linked to someone's file outside (here a valid shard: it would be trained on unseen), or a pipe
    named as a shard (the read would block), is one line naming it."""
    import shutil

    mine = tmp_path / "mine"
    shutil.copytree(tiny_dataset, mine)
    shard = sorted(mine.glob("tfrecords-jpeg-*/train/*.tfrec"))[0]
    outside = tmp_path / "private.tfrec"
    shutil.copy(shard, outside)
    shard.unlink()
    if what == "link out":
        shard.symlink_to(outside)
        says = f"{mine}: shard '{shard.relative_to(mine)}' leaves {mine} (a link out of it)"
    elif what == "pipe":
        os.mkfifo(shard)
        says = f"{shard}: not a regular file (a pipe or a device); not read"
    else:
        shard.symlink_to(mine / "gone.tfrec")
        says = f"{shard}: cannot be read (No such file or directory)"
    tree = Tree(tmp_path)
    code, line = _fetch_here(capsys, "--from", str(mine), "--data-dir", str(tmp_path / "data"))
    _assert_refused(code, line, says, tree)
    record(f"fetch: a shard read in place ({what})", f"a `.tfrec` is a {what}", line, 2, "nothing written")
