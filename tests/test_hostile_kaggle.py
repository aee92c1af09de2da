"""Kaggle's answers and gs:// listings are input too: a hostile server's file names, a kernel slug
with `..`, a downloaded summary naming a path or scoring `inf`, an object name leaving its bucket
folder. Each is refused in one line, exit 2, with nothing written outside the run's own folders.

The real `kaggle` client talks to the loopback server (tests/kaggle_server.py); the one case that
shows the command line end to end runs `python -m pipeline` in a new process, the others run the
same stage in this process (cheaper: the client and the code are the same).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.core import kaggle_client
from pipeline.core.errors import PetalsError
from pipeline.kernels.client.metadata import METADATA, SUMMARY
from tests.conftest import run_cli
from tests.hostile import Tree, one_error_line, record
from tests.kaggle_server import Behaviour, KaggleTestServer

KERNEL = "petals-user/petals-tiny"
SUMMARY_FIELDS = {
    "run_id": "default-cnn-192-abc",
    "competition": "flowers",
    "metrics": {"backbone": "cnn", "evaluation": {"val_macro_f1": 0.9, "val_accuracy": 0.9}},
}


def _kernel_folder(tmp_path: Path, kernel: str = KERNEL) -> list[str]:
    """A kernel folder as `make kernel` leaves it (only its metadata matters to `kernel output`);
    the stage's arguments for it."""
    folder = tmp_path / "kernels" / "petals-tiny"
    folder.mkdir(parents=True)
    (folder / METADATA).write_text(json.dumps({"id": kernel, "code_file": "petals_kernel.py"}))
    return [
        "kernel", "output", "--kernels-dir", str(tmp_path / "kernels"), "--name", "petals-tiny",
        "--submissions-dir", str(tmp_path / "subs"),
    ]  # fmt: skip


def _summary(**changes) -> bytes:
    return json.dumps({**SUMMARY_FIELDS, **changes}).encode()


def _output_here(args: list[str], capsys, files: dict[str, bytes]) -> tuple[int, str]:
    """`kernel output` in this process against a server answering with `files`: the exit code and
    the one error line."""
    with KaggleTestServer(Behaviour(kernel_files=files)):
        code = cli.main(args)
    return code, one_error_line(capsys.readouterr().err)


def _allowed(tmp_path: Path) -> tuple[Path, ...]:
    """What `kernel output` may write: the kernel's output folder and the leaderboard's folder;
    the client's own state under HOME is not the stage's doing."""
    return (tmp_path / "kernels" / "petals-tiny" / "output", tmp_path / "subs", tmp_path / "home")


def test_an_absolute_output_name_is_refused_before_anything_is_written(tmp_path, kaggle_env):
    outside = tmp_path / "elsewhere" / "pwned.txt"  # an absolute path, as the server names it
    args = _kernel_folder(tmp_path)
    tree = Tree(tmp_path, _allowed(tmp_path))
    files = {"submission.csv": b"id,label\n", str(outside): b"pwned", SUMMARY: _summary()}
    with KaggleTestServer(Behaviour(kernel_files=files)):
        result = run_cli(*args, env=kaggle_env)
    line = one_error_line(result.stderr)
    assert result.returncode == 2
    assert (
        f"kernel {KERNEL}: output file" in line and "'/tmp/pytest-of-" in line and "leaves its folder" in line
    )
    assert tree.changes() == [] and not outside.exists()
    assert not (tmp_path / "kernels" / "petals-tiny" / "output" / "submission.csv").exists()
    assert not (tmp_path / "subs").exists()
    record(
        "kernel output: absolute name", "server lists output `/tmp/.../pwned.txt`", line, 2, "nothing written"
    )


def test_an_output_name_climbing_out_is_refused(tmp_path, in_kaggle_env, capsys):
    args = _kernel_folder(tmp_path)
    tree = Tree(tmp_path, _allowed(tmp_path))
    code, line = _output_here(args, capsys, {SUMMARY: _summary(), "../../x": b"pwned"})
    assert code == 2
    assert f"kernel {KERNEL}: output file '../../x' leaves its folder" in line
    assert tree.changes() == [] and not (tmp_path / "x").exists()
    assert not (tmp_path / "kernels" / "petals-tiny" / "output" / SUMMARY).exists()
    record("kernel output: `../../x`", "server lists output `../../x`", line, 2, "nothing written")


def test_an_output_name_through_a_link_out_is_refused(tmp_path, in_kaggle_env, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    output = tmp_path / "kernels" / "petals-tiny" / "output"
    args = _kernel_folder(tmp_path)
    output.mkdir()
    (output / "runs").symlink_to(outside)  # left by an earlier, careless download
    tree = Tree(tmp_path, (tmp_path / "subs", tmp_path / "home"))
    with KaggleTestServer(Behaviour(kernel_files={SUMMARY: _summary(), "runs/x.txt": b"pwned"})):
        code = cli.main(args)
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "output file 'runs/x.txt' leaves" in line and "a link out of it" in line
    assert tree.changes() == [] and list(outside.iterdir()) == []
    record("kernel output: name through a link", "`runs/x.txt`, runs/ a link out", line, 2, "nothing written")


def test_a_kernel_slug_with_dots_is_refused_before_any_call(tmp_path, in_kaggle_env, capsys):
    args = _kernel_folder(tmp_path, "petals-user/../../x")
    tree = Tree(tmp_path, _allowed(tmp_path))
    behaviour = Behaviour(kernel_files={SUMMARY: _summary()})
    with KaggleTestServer(behaviour):
        code = cli.main(args)
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and METADATA in line and "kernel slug" in line and "'../../x'" in line
    assert behaviour.requests == [] and tree.changes() == []
    record("kernel slug with `..`", "kernel id `petals-user/../../x`", line, 2, "nothing written, no request")


@pytest.mark.parametrize(
    ("case", "changes", "expected"),
    [
        ("hostile competition", {"competition": "x/../../../../tmp/pwn"}, "competition 'x/../../../"),
        ("hostile run id", {"run_id": "../../board"}, "run_id '../../board' is not a plain name"),
        (
            "infinite score",
            {"metrics": {"evaluation": {"val_macro_f1": float("inf")}}},
            "metrics.evaluation.val_macro_f1 'inf' is not a finite number",
        ),
        (
            "NaN score",
            {"metrics": {"val_accuracy": float("nan")}},
            "metrics.val_accuracy 'nan' is not a finite number",
        ),
        (
            "score as text",
            {"metrics": {"epochs": "20; rm -rf"}},
            "metrics.epochs '20; rm -rf' is not a finite",
        ),
        ("submission file out", {"submission_file": "/etc/passwd"}, "submission_file '/etc/passwd' leaves"),
    ],
)
def test_a_hostile_summary_is_refused_before_the_leaderboard(
    tmp_path, in_kaggle_env, capsys, case, changes, expected
):
    output = tmp_path / "kernels" / "petals-tiny" / "output"
    args = _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (output, tmp_path / "home"))  # the download itself lands in output/
    code, line = _output_here(args, capsys, {SUMMARY: _summary(**changes)})
    assert code == 2
    assert SUMMARY in line and f"(kernel {KERNEL})" in line and expected in line, line
    assert tree.changes() == [] and not (tmp_path / "subs").exists()
    assert sorted(p.name for p in output.iterdir()) == ["petals-tiny.log", SUMMARY]
    given = json.dumps(changes, allow_nan=True)
    record(
        f"kernel summary: {case}",
        f"{SUMMARY} with {given}",
        line,
        2,
        "its download in output/; no leaderboard",
    )


def test_a_competition_slug_that_is_not_a_name_is_refused_before_the_download(tmp_path, in_kaggle_env):
    tree = Tree(tmp_path, (tmp_path / "home",))
    with KaggleTestServer(Behaviour(archive=b"PK")) as server, pytest.raises(PetalsError) as refusal:
        kaggle_client.download_competition("../../x", tmp_path / "cache")
    line = str(refusal.value)
    assert "competition slug '../../x' is not a plain name" in line
    assert server.behaviour.requests == [] and tree.changes() == []
    record(
        "kaggle download: slug `../../x`",
        "competition slug `../../x`",
        line,
        None,
        "nothing written, no request",
    )


def test_a_download_named_oddly_by_the_server_stays_in_the_cache(tmp_path, in_kaggle_env, capsys):
    """The client names the archive from the URL Kaggle redirects to; a URL ending `.b/c` makes it
    a folder `<slug>.b` in the download cache, which petals refuses instead of unpacking."""
    behaviour = Behaviour(archive=b"PK", download_location="/files/{slug}.b/c")
    tree = Tree(tmp_path, (tmp_path / "data.download", tmp_path / "home"))
    with KaggleTestServer(behaviour):
        code = cli.main(
            ["fetch", "--source", "kaggle", "--data-dir", str(tmp_path / "data"), "--no-progress"]
        )
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "left 'tpu-getting-started.b'" in line and "not an archive file" in line
    assert tree.changes() == [] and not (tmp_path / "data").exists()
    record("kaggle download: odd name", "redirect to `/files/<slug>.b/c`", line, 2, "only the download cache")


@pytest.mark.parametrize("member", ["../evil.txt", "/tmp/evil.txt"])
def test_a_kaggle_archive_member_leaving_the_data_dir_is_refused(tmp_path, in_kaggle_env, capsys, member):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("sample_submission.csv", "id,label\n")
        zf.writestr(member, "pwned")
    tree = Tree(tmp_path, (tmp_path / "data.download", tmp_path / "home"))
    with KaggleTestServer(Behaviour(archive=buffer.getvalue())):
        code = cli.main(
            ["fetch", "--source", "kaggle", "--data-dir", str(tmp_path / "data"), "--no-progress"]
        )
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "unsafe member path" in line and repr(member) in line
    assert tree.changes() == [] and not (tmp_path / "data").exists() and not Path("/tmp/evil.txt").exists()
    record(f"kaggle archive member `{member}`", f"zip member `{member}`", line, 2, "data dir untouched")


@pytest.mark.parametrize("name", ["../../evil.tfrec", "/tmp/evil.tfrec"])
def test_a_gcs_listing_leaving_its_folder_is_refused_before_copying(
    tmp_path, tiny_dataset, capsys, monkeypatch, name
):
    """A bucket's object names are its owner's: the listing is checked before the first copy."""
    from pipeline.data import layout

    remote = str(tiny_dataset)
    listed = layout.data_files  # what the gcs source lists a bucket with

    def hostile_listing(root, spec, sizes, labelled_only=False):
        return [*listed(root, spec, sizes, labelled_only), f"{root.rstrip('/')}/{name}"]

    monkeypatch.setattr(layout, "data_files", hostile_listing)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    tree = Tree(tmp_path)
    args = [
        "fetch",
        "--source",
        "gcs",
        "--gcs-path",
        remote,
        "--data-dir",
        str(tmp_path / "data"),
        "--no-progress",
    ]
    code = cli.main([*args, "--sizes", "32"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and f"listing of {remote}: object name {name!r} leaves its folder" in line
    assert tree.changes() == [] and not Path("/tmp/evil.tfrec").exists()
    record(f"gs:// listing `{name}`", f"object `{name}` in the listing", line, 2, "nothing written")


def _refused_output(args: list[str], capsys, behaviour: Behaviour) -> tuple[int, str]:
    """`kernel output` in this process against a server playing `behaviour`: the exit code and the
    one error line."""
    with KaggleTestServer(behaviour):
        code = cli.main(args)
    return code, one_error_line(capsys.readouterr().err)


def _listing(*entries: tuple[str, str]) -> list[dict]:
    return [{"fileName": name, "url": url} for name, url in entries]


GOOD_URL = f"http://localhost:7777/kernel-files/{SUMMARY}"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file:///etc/passwd", "has download URL 'file:///etc/passwd', not an http(s) URL with a host"),
        ("", "has download URL '', not an http(s) URL with a host"),
        ("http:///passwd", "has download URL 'http:///passwd', not an http(s) URL with a host"),
    ],
)
def test_an_output_url_that_is_not_http_is_refused_before_any_download(
    tmp_path, in_kaggle_env, capsys, url, expected
):
    args = _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (tmp_path / "home",))
    listing = _listing((SUMMARY, GOOD_URL), ("passwd", url))
    behaviour = Behaviour(kernel_files={SUMMARY: _summary()}, kernel_listing=listing)
    code, line = _refused_output(args, capsys, behaviour)
    assert code == 2 and f"kernel {KERNEL}: output file 'passwd' {expected}" in line, line
    assert tree.changes() == [] and not (tmp_path / "kernels" / "petals-tiny" / "output").exists()
    assert not [r for r in behaviour.requests if r["path"].startswith("/kernel-files/")]
    record(
        f"kernel output: URL {url!r}", f"output `passwd` at `{url}`", line, 2, "nothing written, no download"
    )


def test_a_download_url_requests_cannot_use_is_one_line(tmp_path, in_kaggle_env, capsys):
    """An http URL with a host that requests still refuses (a port past 65535): its InvalidURL is
    an OSError without errno, which would otherwise reach the user as a traceback."""
    args = _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (tmp_path / "home",))
    listing = _listing((SUMMARY, GOOD_URL), ("x.bin", "http://localhost:99999/x.bin"))
    code, line = _refused_output(
        args, capsys, Behaviour(kernel_files={SUMMARY: _summary()}, kernel_listing=listing)
    )
    assert code == 2
    assert f"kernel {KERNEL}: downloading output 'x.bin' from 'http://localhost:99999/x.bin' failed" in line
    assert "(InvalidURL)" in line and "nothing downloaded" in line
    assert tree.changes() == [] and not (tmp_path / "kernels" / "petals-tiny" / "output").exists()
    record(
        "kernel output: URL requests refuses", "`http://localhost:99999/x.bin`", line, 2, "nothing written"
    )


def test_an_endless_output_listing_is_refused(tmp_path, in_kaggle_env, capsys, monkeypatch):
    from pipeline.core import kaggle_outputs

    monkeypatch.setattr(kaggle_outputs, "MAX_LISTING_PAGES", 3)  # 1000 in use; 3 keeps the case quick
    args = _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (tmp_path / "home",))
    behaviour = Behaviour(kernel_files={SUMMARY: _summary()}, kernel_page_token="again")
    code, line = _refused_output(args, capsys, behaviour)
    assert code == 2
    assert f"kernel {KERNEL}: Kaggle's listing of its outputs goes on past 3 pages of 100 files" in line
    pages = [r for r in behaviour.requests if r["path"].endswith("/ListKernelSessionOutput")]
    assert len(pages) == 3 and not [r for r in behaviour.requests if r["path"].startswith("/kernel-files/")]
    assert tree.changes() == [] and not (tmp_path / "kernels" / "petals-tiny" / "output").exists()
    record("kernel output: endless listing", "nextPageToken on every page", line, 2, "nothing written")


@pytest.mark.parametrize(
    ("case", "listing", "files", "expected"),
    [
        (
            "`a` and `a/b`",
            None,
            {"a": b"file", "a/b": b"inside it"},
            "output file 'a/b' lies inside output file 'a', which cannot be a file and a folder",
        ),
        (
            "a name twice",
            _listing(
                ("a", "http://localhost:7777/kernel-files/a"), ("./a", "http://localhost:7777/kernel-files/a")
            ),
            {"a": b"file"},
            "output files 'a' and './a' are the same file",
        ),
    ],
)
def test_outputs_that_collide_are_refused_before_anything_is_written(
    tmp_path, in_kaggle_env, capsys, case, listing, files, expected
):
    args = _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (tmp_path / "home",))
    behaviour = Behaviour(kernel_files={SUMMARY: _summary(), **files}, kernel_listing=listing)
    code, line = _refused_output(args, capsys, behaviour)
    assert code == 2 and f"kernel {KERNEL}: {expected}; nothing downloaded" in line, line
    assert tree.changes() == [] and not (tmp_path / "kernels" / "petals-tiny" / "output").exists()
    assert not [r for r in behaviour.requests if r["path"].startswith("/kernel-files/")]
    names = [entry["fileName"] for entry in listing] if listing else list(files)
    given = f"outputs {' and '.join(names)}"
    record(f"kernel output: {case}", given, line, 2, "nothing written, no download")


def test_outputs_adding_up_past_the_cap_are_refused_and_none_is_left(
    tmp_path, in_kaggle_env, capsys, monkeypatch
):
    """Kaggle keeps 20 GB of a kernel's outputs in all: two files that each fit the budget but not
    together are refused, and the one that arrived first is not left behind either."""
    from pipeline.core import kaggle_outputs

    summary = _summary()
    budget = len(summary) + 10
    monkeypatch.setattr(kaggle_outputs, "MAX_OUTPUT_BYTES", budget)
    output = tmp_path / "kernels" / "petals-tiny" / "output"
    args = _kernel_folder(tmp_path)
    tree = Tree(tmp_path, (tmp_path / "home",))
    behaviour = Behaviour(kernel_files={SUMMARY: summary, "big.bin": b"x" * len(summary)})
    code, line = _refused_output(args, capsys, behaviour)
    assert code == 2
    assert f"kernel {KERNEL}: outputs up to 'big.bin' add up to more than {budget} bytes" in line
    assert "nothing downloaded" in line
    downloads = [r["path"] for r in behaviour.requests if r["path"].startswith("/kernel-files/")]
    assert downloads == [f"/kernel-files/{SUMMARY}", "/kernel-files/big.bin"]  # each fits alone
    assert tree.changes() == [] and not output.exists()
    record(
        "kernel output: past the total cap",
        "two outputs, each under the cap, over it together",
        line,
        2,
        "nothing written (the first, downloaded, removed)",
    )


def test_outputs_within_the_cap_are_moved_into_place_together(tmp_path, in_kaggle_env, capsys):
    """The staging folder is gone once the outputs are in place, nested names included."""
    output = tmp_path / "kernels" / "petals-tiny" / "output"
    args = _kernel_folder(tmp_path)
    files = {SUMMARY: _summary(), "runs/a/model.keras": b"weights"}
    with KaggleTestServer(Behaviour(kernel_files=files)):
        assert cli.main(args) == 0
    assert (output / "runs" / "a" / "model.keras").read_bytes() == b"weights"
    assert {p.name for p in output.iterdir()} == {"petals-tiny.log", "runs", SUMMARY}


def test_a_killed_downloads_staging_folder_goes_with_the_next_download(tmp_path, in_kaggle_env):
    """A `kill -9` mid-download left its staging folder (up to Kaggle's 20 GB) in the output folder
    for good: the next `kernel output` removes it once its process is gone."""
    import subprocess
    import sys

    from pipeline.core import lock

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    args = _kernel_folder(tmp_path)
    output = tmp_path / "kernels" / "petals-tiny" / "output"
    left = output / f".petals-download-{lock.process_name().split('.')[0]}.{int(gone.stdout)}.1.x" / "0"
    left.mkdir(parents=True)
    (left / "model.keras").write_bytes(b"x" * 1000)
    with KaggleTestServer(Behaviour(kernel_files={SUMMARY: _summary()})):
        assert cli.main(args) == 0
    assert {p.name for p in output.iterdir()} == {"petals-tiny.log", SUMMARY}


def test_a_quota_answer_past_what_a_duration_holds_is_one_line(in_kaggle_env):
    """Kaggle's answers are a stranger's: a quota of 10^30 hours overflowed the client's
    timedelta (an OverflowError traceback out of `make kernel-fanout`)."""
    said = r"is not one this kaggle client can read \(OverflowError"
    with KaggleTestServer(Behaviour(quota={"gpu": (0.0, 0.0, 1e30)})), pytest.raises(PetalsError, match=said):
        kaggle_client.accelerator_quota()
