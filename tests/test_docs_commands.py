"""Every command README.md and docs/ show runs as written, checked without running it.

A `make` command may name only targets the Makefile has and knobs it reads; a `python -m pipeline`
command must be accepted by its stage's own argument parser. Commands come from shell code fences
(```bash, or no language) and from inline code that starts with `make ` or `python -m pipeline`.
The benchmark pages and the generated tables (FAULTS.md, SECURITY.md) quote past commands and
outputs, so they are not read; neither are lines run on a TPU VM (gcloud, gsutil)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from pipeline import cli

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = ROOT / "Makefile"
NOT_READ = ("BENCHMARKS", "FAULTS.md", "SECURITY.md")
SHELL_FENCES = {"", "bash", "sh", "shell"}
ON_A_VM = ("gcloud ", "gsutil ")
PIPELINE = re.compile(r"^(?:\S*/)?python3? -m pipeline(?:\s|$)")
PLACEHOLDER = "PLACEHOLDER"  # what `<you>`, `<stage>` and the like become before the command is split
ENDS_A_COMMAND = {"&&", "||", ";", "|", "&", ">", ">>", "<", "(", ")"}


def doc_pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [page for page in pages if not page.name.startswith(NOT_READ)]


def split_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line, each as its words (comments and quotes as bash
    reads them; a quote a VM command left open on an earlier line is dropped)."""
    line = re.sub(r"<[^<>\n]+>", PLACEHOLDER, line)
    for text in (line, line.strip().strip("'\"")):
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            words = list(lexer)
            break
        except ValueError:
            continue
    else:
        raise ValueError(f"not a shell line: {line!r}")
    commands, current = [], []
    for word in [*words, ";"]:
        if word in ENDS_A_COMMAND:
            if current:
                commands.append(current)
            current = []
        else:
            current.append(word)
    return commands


def is_checked(words: list[str]) -> bool:
    return words[0] == "make" or bool(PIPELINE.match(" ".join(words)))


def commands_in(text: str) -> list[str]:
    """The make and `python -m pipeline` commands of one page, each as one line of words."""
    found: list[str] = []
    prose: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        marker = re.match(r"^\s*```(\w*)", line)
        if marker:
            fence = None if fence is not None else marker.group(1)
            continue
        if fence is None:
            prose.append(line)
        elif fence in SHELL_FENCES and ("make " in line or "-m pipeline" in line):
            if any(vm in line for vm in ON_A_VM):
                continue
            for words in split_commands(line):
                if is_checked(words):
                    found.append(shlex.join(words))
    for code in re.findall(r"`([^`]+)`", "\n".join(prose)):
        code = " ".join(code.split())
        if code.startswith("make ") or PIPELINE.match(code):
            found.extend(shlex.join(words) for words in split_commands(code) if is_checked(words))
    return found


def makefile_targets(text: str) -> set[str]:
    """The targets of the Makefile's rule lines (not pattern rules, variables or special targets)."""
    targets = set()
    for line in text.splitlines():
        rule = re.match(r"^([^:#=\s][^:#=]*?)\s*::?(?!=)", line)
        if rule:
            targets.update(name for name in rule.group(1).split() if not re.search(r"[$%]|^\.", name))
    return targets


def makefile_knobs(text: str) -> set[str]:
    """The variables the Makefile reads: `$(VAR)` anywhere, or a default given with `VAR ?=`."""
    return set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", text)) | set(
        re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\s*\?=", text, re.MULTILINE)
    )


MAKEFILE_TEXT = MAKEFILE.read_text()
TARGETS = makefile_targets(MAKEFILE_TEXT)
KNOBS = makefile_knobs(MAKEFILE_TEXT)


def make_problems(command: str, targets: set[str] = TARGETS, knobs: set[str] = KNOBS) -> list[str]:
    """What in a `make ...` command the Makefile does not have; empty when it all exists."""
    problems = []
    for word in shlex.split(command)[1:]:
        if "=" in word:
            knob = word.split("=", 1)[0]
            if knob not in knobs:
                problems.append(f"knob {knob} is not a variable the Makefile reads")
        elif word.startswith("-"):
            problems.append(f"option {word}: the docs pass knobs, not make's options")
        elif word not in targets:
            problems.append(f"target {word} is not in the Makefile")
    return problems


def pipeline_problem(command: str, parser) -> str | None:
    """Why the stage's parser refuses a `python -m pipeline ...` command, or None."""
    words = shlex.split(command)
    argv = words[words.index("pipeline") + 1 :]
    stage = next((word for word in argv if not word.startswith("-")), None)
    if stage == PLACEHOLDER:
        return None  # `python -m pipeline <stage>`: names no stage
    names = stage.split(",") if stage else [stage]
    if len(names) > 1 and tuple(names) not in cli.TOGETHER:  # `evaluate,predict`: one process
        return f"stages {stage} do not run together"
    at = argv.index(stage) if stage else 0
    for name in names:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
                parser.parse_args([*argv[:at], name, *argv[at + 1 :]] if stage else argv)
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                return said.getvalue().strip() or f"exit {exit_.code}"
    return None


COMMANDS = [
    (page.relative_to(ROOT).as_posix(), command)
    for page in doc_pages()
    for command in commands_in(page.read_text())
]
MAKE_COMMANDS = sorted({item for item in COMMANDS if item[1].startswith("make ")})
PIPELINE_COMMANDS = sorted({item for item in COMMANDS if not item[1].startswith("make ")})


def ids(items: list[tuple[str, str]]) -> list[str]:
    return [f"{page}: {command}" for page, command in items]


@pytest.fixture(scope="module")
def pipeline_parser():
    """Every stage's parser, built once: building it imports the stages (and TensorFlow)."""
    from pipeline.cli import build_parser

    return build_parser()


@pytest.mark.parametrize(("page", "command"), MAKE_COMMANDS, ids=ids(MAKE_COMMANDS))
def test_each_make_command_names_targets_and_knobs_the_makefile_has(page, command):
    assert make_problems(command) == [], f"{page}: `{command}`"


@pytest.mark.parametrize(("page", "command"), PIPELINE_COMMANDS, ids=ids(PIPELINE_COMMANDS))
def test_each_pipeline_command_is_accepted_by_its_stage(page, command, pipeline_parser):
    assert pipeline_problem(command, pipeline_parser) is None, f"{page}: `{command}`"


def test_the_docs_commands_are_found_in_fences_and_inline_code():
    readme = dict.fromkeys(command for page, command in COMMANDS if page == "README.md")
    assert "make train submit" in readme and "make test" in readme  # the two commands, from a fence
    assert any(page == "docs/kernels.md" and command == "make kernel-status" for page, command in COMMANDS)
    assert len(MAKE_COMMANDS) > 50 and len(PIPELINE_COMMANDS) > 5


def test_the_make_checker_refuses_a_target_or_knob_the_makefile_lacks():
    assert make_problems("make train submit FOLDS=5 SET='a=1 b=2'") == []
    assert make_problems("make train sumbit FOLDZ=5") == [
        "target sumbit is not in the Makefile",
        "knob FOLDZ is not a variable the Makefile reads",
    ]
    assert make_problems("make -j4 train") == ["option -j4: the docs pass knobs, not make's options"]


def test_the_makefile_parsers_read_rules_and_variables():
    text = "KNOB ?= 1#  a knob\nuse: dep | order ## help\n\t$(PY) -m x $(OTHER)\nNAME := v\n.PHONY: use\n"
    assert makefile_targets(text) == {"use"}
    assert makefile_knobs(text) == {"KNOB", "PY", "OTHER"}


def test_the_pipeline_checker_refuses_a_stage_or_option_the_cli_lacks(pipeline_parser):
    def problem(command: str) -> str | None:
        return pipeline_problem(command, pipeline_parser)

    assert problem("python -m pipeline fetch --source gcs --gcs-in-place") is None
    assert "--no-such-option" in problem("python -m pipeline fetch --no-such-option")
    assert "fetchh" in problem("python -m pipeline fetchh")
    assert "--runs" in problem("python -m pipeline ensemble")  # a required option left out
    assert problem("python -m pipeline evaluate,predict --tta 2") is None
    assert problem("python -m pipeline predict,evaluate") == "stages predict,evaluate do not run together"
    assert "--no-such" in problem("python -m pipeline evaluate,predict --no-such")


def test_shell_lines_are_split_as_bash_reads_them():
    line = 'cd petals && make fetch SET="a=1 b=2" OWNER=<you> &&   # a comment'
    make = ["make", "fetch", "SET=a=1 b=2", f"OWNER={PLACEHOLDER}"]
    assert split_commands(line) == [["cd", "petals"], make]
    page = "Run `make\nkernel-status`.\n```bash\nmake test  # the suite\n```\n```text\nmake nothing\n```\n"
    assert commands_in(page) == ["make test", "make kernel-status"]
