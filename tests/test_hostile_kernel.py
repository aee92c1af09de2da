"""Hostile input, part F: a kernel carries only what the pipeline needs.

The cases run `python -m pipeline kernel ...` from a throwaway clone of this checkout (its
uncommitted sources committed there), so a stray file or a commit in a case never touches the
real checkout: an untracked notes.txt holding a key stays out of the bundle, a tracked one is
refused naming the file with nothing left behind, and a kernel name or source that would leave
kernels/ is refused where the arguments are read.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.core.errors import PetalsError
from pipeline.kernels.client import bundle, generate
from pipeline.kernels.client.metadata import SCRIPT
from tests.conftest import REPO
from tests.hostile import Tree, one_error_line, record

# Each generation runs the kernel script's --help in a new process (and the clone is a git clone):
# part of `make test`, not of the inner loop `make test-fast`.
pytestmark = pytest.mark.slow

KEY_LINE = "KAGGLE_KEY=0123456789abcdef0123456789abcdef\n"  # a .env line, as a careless hand pastes it
NOTES = "competition/flowers/notes.txt"
NAME = "petals-hostile"
# The Make variable behind each option (`make kernel KERNEL=...`)
MAKE_VARIABLE = {
    "--name": "KERNEL",
    "--owner": "OWNER",
    "--resume-from": "RESUME_FROM",
    "--dataset": "DATASETS",
    "--model": "MODELS",
}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=petals-test", "-c", "user.email=test@petals", "-c", "commit.gpgsign=false",
         *args],
        cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A clone of this checkout whose bundled packages are the checkout's as they are now, committed:
    changed files (staged or not) and new modules (untracked .py) copied in, nothing else untracked."""
    root = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(REPO), str(root)], check=True)
    folders = list(bundle.BUNDLED)
    modified = _git(REPO, "diff", "-z", "--name-only", "HEAD", "--", *folders).split("\0")  # staged too
    new = _git(REPO, "ls-files", "-z", "--others", "--exclude-standard", "--", *folders).split("\0")
    for name in [*filter(None, modified), *(n for n in new if n.endswith(".py"))]:
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
        else:
            (root / name).unlink(missing_ok=True)
    _git(root, "add", "-A", "--", *folders)
    if _git(root, "status", "--porcelain", "--", *folders):
        _git(root, "commit", "--quiet", "-m", "the checkout's sources as they are now")
    return root


def _petals(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m pipeline kernel ...` run from the clone's root, on the clone's sources, with no
    Kaggle credentials and no bytecode written into the clone."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("KAGGLE_KEY", "KAGGLE_API_TOKEN", "KAGGLE_USERNAME")
    }
    env.update(
        PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1", KAGGLE_CONFIG_DIR=str(root.parent / "no-creds")
    )
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "kernel", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def _generate(root: Path, *extra: str) -> subprocess.CompletedProcess:
    return _petals(root, "generate", "--owner", "petals-user", "--name", NAME, "--recipe", "default", *extra)


def _members(folder: Path) -> dict[str, bytes]:
    code = (folder / SCRIPT).read_text()
    encoded = code.split('BUNDLE = """\n', 1)[1].split('\n"""', 1)[0]
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(encoded))) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.fixture(scope="module")
def generated(clone):
    """The flowers kernel generated from the clone with an untracked notes.txt holding a key beside
    competition.toml: the run, and what changed in the clone outside .git and the kernel folder."""
    (clone / NOTES).write_text(KEY_LINE)
    tree = Tree(clone, allowed=(clone / ".git", clone / "kernels" / NAME))
    done = _generate(clone)
    return done, tree.changes()


@pytest.mark.slow  # generation runs the kernel's --help in a fresh process
def test_an_untracked_file_with_a_key_is_left_out_and_the_kernel_still_runs(clone, generated):
    done, changes = generated
    assert done.returncode == 0, done.stderr[-3000:]
    (info,) = [line for line in done.stderr.splitlines() if "left out of the bundle" in line]
    assert info.startswith("kernel: 1 untracked file(s)") and info.endswith(NOTES)
    members = _members(clone / "kernels" / NAME)
    tracked = [n for n in _git(clone, "ls-files", "--", *bundle.BUNDLED).split() if bundle._carried(n)]
    assert sorted(members) == tracked and NOTES not in members  # what git tracks, nothing more
    assert not any(b"0123456789abcdef0123456789abcdef" in data for data in members.values())
    # generation ran the tracked-only bundle's --help in a clean process: it imports
    assert "competition/flowers/competition.toml" in members and "pipeline/cli.py" in members
    assert changes == []
    record(
        "kernel: untracked notes.txt with a key",
        f"untracked {NOTES} holding KAGGLE_KEY=<32 hex>",
        info,
        done.returncode,
        "kernel written without notes.txt (1 untracked file left out); checkout untouched",
    )


@pytest.mark.slow  # needs the generated kernel
def test_a_tracked_file_with_a_key_is_refused_by_name_and_the_earlier_kernel_stays(clone, generated):
    assert generated[0].returncode == 0
    _git(clone, "add", "--", NOTES)
    _git(clone, "commit", "--quiet", "-m", "a careless commit")
    try:
        tree = Tree(clone, allowed=(clone / ".git",))  # the earlier kernel folder is NOT allowed to change
        done = _generate(clone)
        changes = tree.changes()
    finally:
        _git(clone, "reset", "--quiet", "--mixed", "HEAD~1")  # notes.txt untracked again
    line = one_error_line(done.stderr)
    assert done.returncode == 2
    assert f"kernels/{NAME}: bundled file {NOTES} contains what looks like a Kaggle key" in line
    assert changes == []  # no staging folder, no partial script, the earlier kernel as it was
    assert not [p for p in (clone / "kernels").iterdir() if p.name.startswith(".")]
    record(
        "kernel: tracked file with a key",
        f"committed {NOTES} holding KAGGLE_KEY=<32 hex>, earlier kernel folder present",
        line,
        done.returncode,
        "nothing written; the earlier kernel folder as it was",
    )


def _staged_kernel(member: str, text: str) -> tuple[str, dict]:
    """A kernel script whose bundle holds one file, and its metadata."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(member, text)
    meta = {
        "id": f"petals-user/{NAME}", "title": NAME.replace("-", " "), "code_file": SCRIPT,
        "language": "python", "kernel_type": "script", "is_private": True, "enable_internet": True,
    }  # fmt: skip
    return generate.script_text({}, buffer.getvalue(), notebook=False), meta


def test_a_refused_kernel_leaves_no_kernels_folder_behind(tmp_path, monkeypatch):
    """The machine's own key, in a bundled file: refused naming the file; the kernels folder this
    generation would have made is not left behind either."""
    monkeypatch.setenv("KAGGLE_KEY", "my-own-kaggle-secret-value")
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "no-creds"))
    script, meta = _staged_kernel("competition/flowers/classes.txt", "daisy\nmy-own-kaggle-secret-value\n")
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError) as refused:
        generate.place_checked(tmp_path / "kernels" / NAME, script, meta)
    line = str(refused.value)  # the function's line; the stage prints it after `petals kernel: error:`
    assert "bundled file competition/flowers/classes.txt contains one of your Kaggle secrets" in line
    assert str(tmp_path / "kernels" / NAME) in line  # the folder asked for, not the staging one
    assert tree.changes() == [] and not (tmp_path / "kernels").exists()
    record(
        "kernel: your own key in a bundled file",
        "KAGGLE_KEY's value inside a bundled classes.txt, no kernels/ yet",
        line,
        None,
        "nothing written (no kernels/ folder)",
    )


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--name", "../evil", "--name '../evil' is not a plain name"),
        ("--owner", "a/b", "--owner 'a/b' is not a plain name"),
        ("--resume-from", "../x", "--resume-from '../x', part '..' is not a plain name"),
    ],
)
def test_a_kernel_name_that_leaves_kernels_is_one_line(clone, option, value, message):
    tree = Tree(clone, allowed=(clone / ".git",))
    extra = [] if option == "--name" else ["--name", NAME + "-2"]
    done = _petals(clone, "generate", "--owner", "petals-user", *extra, option, value)
    line = one_error_line(done.stderr)
    assert done.returncode == 2 and message in line
    assert tree.changes() == [] and not (clone / "evil").exists()
    record(
        f"kernel: {option} {value}",
        f"make kernel {MAKE_VARIABLE[option]}={value}",
        line,
        done.returncode,
        "nothing written",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "me/.."], "--dataset 'me/..', part '..' is not a plain name"),
        (["--model", "keras/../keras/b0/1"], "--model 'keras/../keras/b0/1', part '..' is not a plain name"),
        (["--name", "/tmp/evil", "output"], "--name '/tmp/evil' is not a plain name"),
    ],
)
def test_every_source_and_action_checks_its_names_first(tmp_path, capsys, args, message):
    """In-process, for the cheaper cases: the names are checked before any action reads a folder."""
    action = args[2] if len(args) > 2 else "generate"
    tree = Tree(tmp_path)
    code = cli.main(
        ["kernel", action, "--kernels-dir", str(tmp_path / "kernels"), "--owner", "me", *args[:2]]
    )
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and message in line
    assert tree.changes() == []
    record(
        f"kernel: {' '.join(args[:2])}",
        f"make {'kernel' if action == 'generate' else 'kernel-' + action} {MAKE_VARIABLE[args[0]]}={args[1]}",
        line,
        code,
        "nothing written",
    )


def test_without_git_the_explicit_list_bundles_what_git_tracks(clone, monkeypatch):
    """An unpacked sdist has no git: its rule (modules, competition files, recipes) picks the same
    files as the tracked ones, and never a stray notes.txt."""
    with_git = bundle.bundle_members(clone)
    (clone / NOTES).write_text(KEY_LINE)  # untracked, as the generated fixture leaves it
    monkeypatch.setattr(bundle, "listed_files", lambda *args, **kwargs: None)
    without_git = bundle.bundle_members(clone)
    assert without_git == with_git and NOTES not in without_git
    assert "competition/flowers/recipes/cpu.toml" in without_git


def test_submit_checks_the_kernel_it_is_given_first(tmp_path, capsys):
    """`make submit KERNEL=...` names a kernel folder too: checked before anything is read or sent."""
    tree = Tree(tmp_path)
    code = cli.main(
        ["submit", "--kernels-dir", str(tmp_path / "kernels"), "--kernel", "../../etc",
         "--submissions-dir", str(tmp_path / "submissions"), "--data-dir", str(tmp_path / "data")]
    )  # fmt: skip
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "--kernel '../../etc' is not a plain name" in line
    assert tree.changes() == []
    record("submit: KERNEL=../../etc", "make submit KERNEL=../../etc", line, code, "nothing written or sent")


def _refused_untracked(clone: Path, made: list[Path], *args: str) -> tuple[str, int, list[str]]:
    """`make kernel` from the clone with the untracked files `made` (written by the caller): the
    error line, the exit code and what changed outside .git; `made` removed after, whatever happens."""
    try:
        tree = Tree(clone, allowed=(clone / ".git",))
        done = _petals(clone, "generate", "--owner", "petals-user", "--name", NAME + "-untracked", *args)
        return one_error_line(done.stderr), done.returncode, tree.changes()
    finally:
        for path in made:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def test_an_untracked_recipe_override_is_refused_not_swapped_for_the_tasks(clone):
    """cassava has no recipes/ of its own: an untracked recipes/tpu.toml trains here, and the kernel,
    which carries only tracked files, would quietly train the task's tpu.toml instead."""
    override = clone / "competition/cassava/recipes/tpu.toml"
    override.parent.mkdir()
    override.write_text("[train]\nepochs = 2\n")
    line, code, changes = _refused_untracked(
        clone, [override.parent], "--set", "competition=cassava", "--recipe", "tpu"
    )
    assert code == 2
    assert "competition/cassava/recipes/tpu.toml is not in the kernel's bundle (the kernel would run " in line
    assert "pipeline/tasks/recipes/image_classification/tpu.toml instead)" in line
    assert line.endswith("git add competition/cassava/recipes/tpu.toml and regenerate")
    assert changes == [] and not (clone / "kernels" / (NAME + "-untracked")).exists()
    record(
        "kernel: untracked recipe override",
        "make kernel COMPETITION=cassava RECIPE=tpu, competition/cassava/recipes/tpu.toml not git-added",
        line,
        code,
        "nothing written",
    )


def test_an_untracked_competition_folder_is_refused_naming_its_file(clone):
    folder = clone / "competition/hostile-new"
    folder.mkdir()
    flowers = (clone / "competition/flowers/competition.toml").read_text()
    (folder / "competition.toml").write_text(flowers.replace('name = "flowers"', 'name = "hostile-new"'))
    shutil.copy(clone / "competition/flowers/classes.txt", folder / "classes.txt")
    line, code, changes = _refused_untracked(
        clone, [folder], "--set", "competition=hostile-new", "--recipe", "default"
    )
    assert code == 2
    assert line.endswith(
        "competition/hostile-new/competition.toml is not in the kernel's bundle: it carries only the files "
        "git tracks under pipeline/, competition/; git add competition/hostile-new/competition.toml and "
        "regenerate"
    )
    assert changes == [] and not (clone / "kernels" / (NAME + "-untracked")).exists()
    record(
        "kernel: untracked competition folder",
        "make kernel COMPETITION=<new>, competition/<new>/ not git-added",
        line,
        code,
        "nothing written",
    )


def test_a_competition_given_as_a_path_or_a_recipe_outside_the_bundle_is_one_line(tmp_path, capsys):
    """The kernel looks its competition and recipe up by name among the files it carries: a
    competition given as a path is carried under its name, unless the bundle has that name already
    (the kernel would load the other one); a recipe file elsewhere would fail on Kaggle, after the queue."""
    recipe = tmp_path / "mine.toml"
    recipe.write_text("[train]\nepochs = 2\n")
    spec = str(REPO / "competition/flowers/competition.toml")
    cases = (
        ("COMPETITION=<a competition.toml's path>", ["--set", f"competition={spec}"],
         "the kernel already carries a competition named 'flowers' (competition/flowers/)"),
        ("RECIPE=/tmp/mine.toml", ["--recipe", str(recipe)],
         "the kernel finds its recipe by name among the files it carries and would run none for 'mine'"),
    )  # fmt: skip
    for given, extra, message in cases:
        tree = Tree(tmp_path)
        code = cli.main(
            ["kernel", "generate", "--kernels-dir", str(tmp_path / "kernels"), "--owner", "me", *extra]
        )
        line = one_error_line(capsys.readouterr().err)
        assert code == 2 and message in line
        assert tree.changes() == [] and not (tmp_path / "kernels").exists()
        record(f"kernel: {given.split('=')[0]} a path", f"make kernel {given}", line, code, "nothing written")


def test_a_competition_given_as_a_path_is_carried_under_its_name(tmp_path):
    """`--set competition=/x/elsewhere/competition.toml`: the kernel loads `elsewhere` by name, so its
    file, class list and recipes go into the bundle as competition/elsewhere/."""
    folder = tmp_path / "mine" / "elsewhere"
    (folder / "recipes").mkdir(parents=True)
    flowers = (REPO / "competition/flowers/competition.toml").read_text()
    (folder / "competition.toml").write_text(flowers.replace('name = "flowers"', 'name = "elsewhere"'))
    shutil.copy(REPO / "competition/flowers/classes.txt", folder / "classes.txt")
    (folder / "recipes" / "mine.toml").write_text("[train]\nepochs = 2\n")
    (folder / "notes.txt").write_text(KEY_LINE)  # beside it, not named by the file: never carried
    spec = str(folder / "competition.toml")
    code = cli.main(["kernel", "generate", "--kernels-dir", str(tmp_path / "kernels"), "--owner", "me",
                     "--set", f"competition={spec}", "--recipe", "mine", "--name", "elsewhere"])  # fmt: skip
    assert code == 0
    members = _members(tmp_path / "kernels" / "elsewhere")
    carried = sorted(name for name in members if name.startswith("competition/elsewhere/"))
    assert carried == [
        f"competition/elsewhere/{n}" for n in ("classes.txt", "competition.toml", "recipes/mine.toml")
    ]
    assert members["competition/elsewhere/competition.toml"] == (folder / "competition.toml").read_bytes()


def test_without_git_each_competitions_own_classes_file_is_bundled(clone, monkeypatch):
    """`classes_file = "labels.txt"`: bundled where there is no git as git would (a stray classes.txt
    beside it is not); a competition file that does not parse is skipped here (load_spec refuses it)."""
    folder, broken = clone / "competition/labelled", clone / "competition/broken"
    flowers = (clone / "competition/flowers/competition.toml").read_text()
    try:
        folder.mkdir()
        broken.mkdir()
        (folder / "competition.toml").write_text(f'classes_file = "labels.txt"\n{flowers}')
        (folder / "labels.txt").write_text("a\nb\n")
        (folder / "classes.txt").write_text("stray\n")
        (broken / "competition.toml").write_text("not = [toml\n")
        (broken / "classes.txt").write_text("stray\n")
        tree = Tree(clone)
        monkeypatch.setattr(bundle, "listed_files", lambda *args, **kwargs: None)
        members = bundle.bundle_members(clone)
        assert tree.changes() == []
    finally:
        shutil.rmtree(folder)
        shutil.rmtree(broken)
    assert "competition/labelled/labels.txt" in members
    assert (
        "competition/labelled/classes.txt" not in members and "competition/broken/classes.txt" not in members
    )
    assert "competition/flowers/classes.txt" in members
    record(
        "kernel: no git, classes_file = labels.txt",
        "a competition naming its own class list, a stray classes.txt beside it, no git",
        "(no error: labels.txt bundled, the stray classes.txt not)",
        0,
        "nothing written",
    )


def test_a_kernel_script_that_never_answers_help_is_one_line(tmp_path, monkeypatch):
    from pipeline.kernels.client import check

    monkeypatch.setattr(check, "HELP_TIMEOUT", 0.5)
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError) as refused:
        check._answers_help("import time\ntime.sleep(30)\n", tmp_path / "kernels" / NAME)
    line = str(refused.value)  # the function's line; the stage prints it after `petals kernel: error:`
    assert f"kernels/{NAME}/{SCRIPT}: the kernel script did not answer --help within 0.5 s" in line
    assert tree.changes() == []
    record(
        "kernel: script hangs on --help",
        "a kernel script whose import never returns (HELP_TIMEOUT cut to 0.5 s)",
        line,
        None,
        "nothing written; the script's process killed",
    )
