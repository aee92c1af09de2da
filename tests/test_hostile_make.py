"""Make passes values, never code (issue 42, part C).

Every case drives `make` itself with a crafted knob: a browser's second download `tpu (1).zip`,
a message with backticks, a `$(shell ...)` Make would run, a folder Make cannot track, a DATA
that is not petals'. Each asserts the line the user sees, the exit code, that the marker a
command would have made is absent, and that nothing outside the run's own folders changed.
Make is pointed at folders in tmp_path (ARGS_DIR, DATA, RUNS_DIR, SUBMISSIONS, INSPECT_DIR), so
the checkout is never written, and `-o <stamp>` keeps it from ever installing the virtualenv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.hostile import Tree, one_error_line, record

VENV = sys.prefix  # the virtualenv running the tests, which `make install` built


def hostile(tmp_path: Path, marker: Path, suffix: str = ".zip") -> str:
    """A path with everything a shell or Make would read as code, each of which would make
    `marker` if it ran: spaces, quotes, `$`, backticks, `;`, `&`, `|`, `$(shell)`, `#`, `,`."""
    run = f"touch {marker}"
    return f'{tmp_path}/tpu (1) it\'s "q" $HOME $5 `{run}` ; {run} & | $({run}) $(shell {run}) #a,b{suffix}'


def make(tmp_path: Path, *args: str, py: Path | None = None):
    """`make -s ARGS` in the checkout, on folders in tmp_path and without Kaggle credentials;
    `py` stands in for the virtualenv's Python (the recipe runs it with the argv it built)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "KAGGLE_CONFIG_DIR": str(home / "kaggle")}
    for name in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN", "MAKEFLAGS", "MFLAGS"):
        env.pop(name, None)
    folders = {
        "ARGS_DIR": "args",
        "DATA": "data",
        "RUNS_DIR": "runs",
        "SUBMISSIONS": "subs",
        "INSPECT_DIR": "inspect",
    }
    command = ["make", "-s", "-C", str(REPO), "-o", f"{VENV}/.installed", f"VENV={VENV}"]
    command += [f"{knob}={tmp_path / name}" for knob, name in folders.items()]
    command += [f"PY={py}"] if py else []
    done = subprocess.run(
        [*command, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert "pip install" not in done.stdout + done.stderr  # the stamp is never remade here
    return done


@pytest.fixture
def argv_log(tmp_path) -> tuple[Path, Path]:
    """A stand-in Python that logs the argv each recipe gave it (a fetch also makes its data dir,
    as the stage would): the log shows each knob arrived as exactly one argument."""
    log, fake = tmp_path / "argv.jsonl", tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        "if 'fetch' in args:\n"
        "    os.makedirs(args[args.index('--data-dir') + 1], exist_ok=True)\n"
        f"open({str(log)!r}, 'a').write(json.dumps(args) + '\\n')\n"
    )
    fake.chmod(0o755)
    return fake, log


def value_after(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == option]


@pytest.mark.slow  # make and the fetch stage's process
def test_a_hostile_zip_path_reaches_fetch_whole_and_runs_nothing(tmp_path):
    """`DATA_FROM="~/Downloads/tpu (1).zip"`, and worse: the stage gets the exact path and says
    it is not there; the .args file records it as one line."""
    marker = tmp_path / "ran"
    given = hostile(tmp_path, marker)
    tree = Tree(tmp_path, allowed=(tmp_path / "args", tmp_path / "home"))
    done = make(tmp_path, "fetch", "SOURCE=dir", f"DATA_FROM={given}")
    line = one_error_line(done.stderr)
    assert f"petals fetch: error: --from {given}: no such file or folder" == line
    assert done.returncode == 2 and not marker.exists()
    assert tree.changes() == [] and not (tmp_path / "data").exists()
    assert given in (tmp_path / "args" / "fetch.args").read_text().splitlines()
    record(
        "make fetch: hostile DATA_FROM",
        "DATA_FROM='tpu (1) it's \"q\" $HOME `touch` ; & $(shell ...) #a,b.zip' (absent)",
        line,
        done.returncode,
        "nothing ran; only the .args file, with the path as one line",
    )


@pytest.mark.slow  # make and the submit stage's process
def test_a_hostile_message_and_file_reach_submit_whole(tmp_path):
    """`make submit MESSAGE='x `touch /tmp/p`'` ran the command: now the message and the file are
    values, and submit names the exact file it cannot check."""
    marker = tmp_path / "ran"
    given = hostile(tmp_path, marker, suffix=".csv")
    tree = Tree(tmp_path, allowed=(tmp_path / "home",))
    done = make(tmp_path, "submit", f"FILE={given}", f"MESSAGE={hostile(tmp_path, marker, '')}")
    line = one_error_line(done.stderr)
    assert line.startswith("petals submit: error: ") and f"checking {given} needs" in line
    assert done.returncode == 2 and not marker.exists() and tree.changes() == []
    record(
        "make submit: hostile MESSAGE and FILE",
        "MESSAGE and FILE with `touch`, $(shell ...), quotes, ; & (FILE absent)",
        line,
        done.returncode,
        "nothing ran, nothing written",
    )


@pytest.mark.slow  # make, once per stage
def test_every_stage_gets_each_knob_as_one_argument(tmp_path, argv_log):
    """Through fetch, train, submit, kernel, ensemble and leaderboard, each single-value knob is
    one argv element, byte for byte, and each word of a list knob is one."""
    fake, log = argv_log
    marker = tmp_path / "ran"
    given = hostile(tmp_path, marker)
    runs = ["a", "it's", "`touch", f"{marker}`", "$(shell", "touch", f"{marker})", "$HOME;&"]
    runs_text = " ".join(runs)
    goals = [
        ("fetch", [f"DATA_FROM={given}", f"GCS_PATH={given}"]),
        ("train", [f"RUN={given}", f"CHECKPOINT_DIR={given}", "SET=a=it's b=$HOME"]),
        ("submit", [f"FILE={given}", f"MESSAGE={given}", f"SLUG={given}", f"KERNEL={given}"]),
        ("kernel", [f"OWNER={given}", f"DATASETS={runs_text}", f"MODELS={runs_text}"]),
        ("ensemble", [f"RUNS={runs_text}", "WEIGHTS=0.6 0.4"]),
        ("leaderboard", [f"SLUG={given}"]),
    ]
    tree = Tree(tmp_path, allowed=(tmp_path / "args", tmp_path / "data", log, tmp_path / "home"))
    for goal, knobs in goals:
        done = make(tmp_path, goal, *knobs, py=fake)
        assert done.returncode == 0, done.stderr
    calls = {}
    for argv in map(json.loads, log.open()):
        calls.setdefault(argv[2], argv)  # the first: each later goal runs fetch again, plainly
    assert value_after(calls["fetch"], "--from") == [given] == value_after(calls["fetch"], "--gcs-path")
    train = calls["train"]
    assert value_after(train, "--run") == [given] == value_after(train, "--checkpoint-dir")
    assert value_after(train, "--set")[1:] == ["a=it's", "b=$HOME"]
    assert value_after(train, "--runs-dir") == [str(tmp_path / "runs")]
    submit = calls["submit"]
    for option in ("--file", "--message", "--slug", "--kernel"):
        assert value_after(submit, option) == [given], option
    assert value_after(calls["kernel"], "--owner") == [given]
    assert value_after(calls["kernel"], "--dataset") == runs == value_after(calls["kernel"], "--model")
    ensemble = calls["ensemble"]
    assert ensemble[ensemble.index("--runs") + 1 : ensemble.index("--weights")] == runs
    assert value_after(calls["leaderboard"], "--slug") == [given]
    assert not marker.exists() and tree.changes() == []
    record(
        "make: every knob to every stage",
        "each path, message, slug, owner knob hostile; SET, RUNS, DATASETS, MODELS lists",
        "(no error: each value is one argv element, byte for byte)",
        0,
        "nothing ran; each stage got exactly what was typed",
    )


def test_make_itself_expands_nothing_a_user_typed(tmp_path):
    """`make help` shows the knobs: a `$(shell ...)` or backticks in one are shown, never run."""
    marker = tmp_path / "ran"
    tree = Tree(tmp_path, allowed=(tmp_path / "home",))
    given = f"`touch {marker}` $(shell touch {marker}) $$HOME"
    # VERBOSE is exported to every recipe's environment: Make expands an exported knob as well
    done = make(tmp_path, "help", f"SET={given}", f"RUN={given}", f"VERBOSE={given}")
    assert done.returncode == 0 and f'SET="{given}"' in done.stdout and f"RUN={given} " in done.stdout
    assert not marker.exists() and tree.changes() == []
    record(
        "make help: $(shell) in a knob",
        "SET, RUN and VERBOSE (exported) = '`touch` $(shell touch) $$HOME'",
        "(shown as typed)",
        done.returncode,
        "nothing ran, nothing written",
    )


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("DATA", "{tmp}/tpu (1)"),
        ("DATA", ""),
        ("INSPECT_DIR", "{tmp}/100%"),
        ("ARGS_DIR", "{tmp}/a:b"),
        ("DATA", "{tmp}/d$(shell touch {tmp}/ran)"),
    ],
)
def test_a_folder_make_cannot_track_is_refused_in_one_line(tmp_path, argv_log, knob, value):
    """DATA, INSPECT_DIR and ARGS_DIR name files Make tracks: a space or Make's own syntax in
    them is refused before anything runs, naming the knob and the value."""
    fake, log = argv_log
    value = value.format(tmp=tmp_path)
    tree = Tree(tmp_path, allowed=(tmp_path / "home",))
    done = make(tmp_path, "inspect", f"{knob}={value}", py=fake)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and f"*** {knob} '{value}' cannot be a folder Make tracks" in lines[0]
    assert done.returncode == 2 and done.stdout == "" and not log.exists()
    assert not (tmp_path / "ran").exists() and tree.changes() == []
    shown = value.replace(str(tmp_path), "<tmp>")
    record(
        f"make: {knob} Make cannot track ({shown or 'empty'})",
        f"{knob}='{shown}'",
        lines[0],
        done.returncode,
        "nothing ran, nothing written",
    )


def test_clean_data_deletes_a_petals_data_dir_and_its_siblings(tmp_path):
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "manifest.json").write_text(json.dumps({"source": "synthetic", "petals_version": "0"}))
    (tmp_path / "data.partial").mkdir()
    (tmp_path / "data.partial" / ".petals-work").touch()  # the mark petals puts in its work folders
    (tmp_path / "data.old" / "mine").mkdir(parents=True)  # a user's backup that happens to be named so
    keep = tmp_path / "data-mine"
    keep.mkdir()
    tree = Tree(tmp_path, allowed=(data, tmp_path / "data.partial", tmp_path / "home"))
    done = make(tmp_path, "clean-data")
    assert done.returncode == 0, done.stderr
    assert not data.exists() and not (tmp_path / "data.partial").exists() and tree.changes() == []
    assert f"petals clean-data: kept {tmp_path / 'data.old'}: not a folder petals made" in done.stderr
    record(
        "make clean-data: a data.old petals did not make",
        "DATA=data beside a user's data.old/",
        done.stderr.strip().splitlines()[-1],
        done.returncode,
        "the data dir and petals' data.partial deleted; data.old kept",
    )


@pytest.mark.parametrize("given", ["{tmp}/mine", "~", "{tmp}"])
def test_clean_data_refuses_a_folder_petals_did_not_fetch(tmp_path, given):
    """`rm -rf $(DATA)` was one typo from deleting a home: clean-data deletes only a folder holding
    the manifest petals wrote, and refuses anything else in one line."""
    home = tmp_path / "home"
    (home / "photos").mkdir(parents=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "manifest.json").write_text('{"mine": true}')  # someone else's manifest
    value = given.format(tmp=tmp_path)
    tree = Tree(tmp_path)
    done = make(tmp_path, "clean-data", f"DATA={value}")
    line = one_error_line(done.stderr)
    shown = str(home) if value == "~" else value
    assert line == (
        f"petals clean-data: error: DATA '{shown}' is not a petals data dir "
        "(no manifest.json of petals fetch in it); nothing deleted"
    )
    assert done.returncode == 2 and tree.changes() == []
    record(
        f"make clean-data: DATA={given.replace('{tmp}', '<tmp>')}",
        {"~": "DATA=~ (the home)", "{tmp}": "DATA=the folder above"}.get(given, "a user's folder"),
        line,
        done.returncode,
        "nothing deleted",
    )


def test_clean_refuses_a_venv_make_install_did_not_build(tmp_path):
    """`rm -rf $(VENV)` with VENV=~/venvs/shared would delete a shared environment: clean deletes
    only a virtualenv holding make install's stamp (only the refusal runs here: clean also empties
    the checkout's caches)."""
    shared = tmp_path / "venvs" / "shared"
    (shared / "bin").mkdir(parents=True)
    tree = Tree(tmp_path, allowed=(tmp_path / "home",))
    done = make(tmp_path, "clean", f"VENV={shared}")
    line = one_error_line(done.stderr)
    assert line == (
        f"petals clean: error: VENV '{shared}' is not a virtualenv make install built "
        "(no .installed in it); nothing deleted"
    )
    assert done.returncode == 2 and tree.changes() == []
    record("make clean: another's VENV", "VENV=<tmp>/venvs/shared", line, done.returncode, "nothing deleted")


def test_a_storage_password_reaches_the_sweep_unechoed_and_whole(tmp_path):
    """`make sweep STORAGE=postgresql://me:PASS@host/db` echoed the password with the command (and
    `ps` showed it): now the URL goes in the environment, byte for byte, and no line shows it."""
    password = "s3cr$t'pw`x`"
    storage = f"postgresql://me:{password}@127.0.0.1:5432/petals?sslmode=require"
    log, fake = tmp_path / "seen.jsonl", tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, pathlib, sys\n"
        "args = sys.argv[1:]\n"
        "if 'fetch' in args:\n"
        "    data = pathlib.Path(args[args.index('--data-dir') + 1])\n"
        "    data.mkdir(parents=True, exist_ok=True)\n"
        "    (data / 'manifest.json').write_text('{}')\n"
        f"open({str(log)!r}, 'a').write(json.dumps([args, os.environ.get('PETALS_STORAGE')]) + '\\n')\n"
    )
    fake.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "PETALS_STORAGE")}
    folders = [f"{knob}={tmp_path / name}" for knob, name in (("ARGS_DIR", "args"), ("DATA", "data"),
               ("RUNS_DIR", "runs"), ("SUBMISSIONS", "subs"), ("INSPECT_DIR", "inspect"))]  # fmt: skip
    command = ["make", "-C", str(REPO), "-o", f"{VENV}/.installed", f"VENV={VENV}", f"PY={fake}", *folders]
    done = subprocess.run(
        [*command, "sweep", f"STORAGE={storage}"], env={**env, "HOME": str(home)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "s3cr" not in done.stdout + done.stderr  # Make echoes each command it runs: not this one
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    argv, given = next((a, s) for a, s in seen if a[:2] == ["-m", "pipeline"] and "sweep" in a)
    assert given == storage and not any("s3cr" in arg for arg in argv)
    record(
        "make sweep: a STORAGE password",
        "STORAGE=postgresql://me:s3cr$t'pw`x`@host/db (a password with $, ' and backticks)",
        "(Make's echo shows no password; the stage gets the URL whole in PETALS_STORAGE)",
        done.returncode,
        "nothing; the password in no output and no argv",
    )


def test_every_knob_with_a_default_is_taken_as_written():
    """A knob missing from KNOBS has its `$(shell ...)` run by Make (BACKBONES was, for
    bench-backbones). The set-up knobs are the exceptions: they name the Python and its install."""
    import re

    text = (REPO / "Makefile").read_text()
    defaults = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*\?=", text, re.MULTILINE))
    listed = set(re.search(r"^KNOBS := (.*?)\n(?!\t)", text, re.MULTILINE | re.DOTALL).group(1).split()) - {
        "\\"
    }
    assert defaults - listed == {"PYTHON", "VENV", "VENV_FLAGS", "INSTALLER", "TF_EXTRA"}
