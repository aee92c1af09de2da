"""Command line: one subcommand per stage; failures become one line and a non-zero exit.

Each stage's `run(args)` turns its arguments into the typed options of `pipeline.api` and calls
the function the API calls: the command line is a thin driver over the library."""

from __future__ import annotations

import argparse
import ast
import errno
import functools
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline.core.children import die_with_launcher
from pipeline.core.errors import EXIT_ERROR, EXIT_PREEMPTED, PetalsError, Preempted, describe_os_error
from pipeline.core.foreign import text
from pipeline.core.machine import engine_environment
from pipeline.core.native_log import filter_tensorflow_start_up

# Other libraries' start-up lines (TensorFlow's C++ log, absl, JAX looking for a TPU, matplotlib
# building its font cache on a fresh machine, the Kaggle clients' progress), hidden unless
# --verbose / VERBOSE=1: what matters to the user among them (a fallback, a skipped file) petals
# says itself, once, in its own words.
CHATTY_LOGGERS = (
    "absl",
    "jax._src.xla_bridge",
    "kagglehub",
    "urllib3",
    "h5py",
    "matplotlib",
    "mlflow",
    "alembic",
)


def verbose_asked() -> bool:
    """VERBOSE=1 in the environment (what `make VERBOSE=1` exports)."""
    return os.environ.get("VERBOSE", "") not in ("", "0")


def hush(verbose: bool) -> None:
    """Before any stage imports TensorFlow or JAX (their C++ logs read the environment once, as
    does TensorFlow's CPU allocator: `engine_environment`); for drivers that import them before
    `main`, like the kernel emulation, too.

    Set, not defaulted: a parent process that imported them passes on its own level (1, which
    lets C++ warnings through); --verbose is how to see them."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0" if verbose else "2"
    engine_environment()
    if verbose:
        return
    filter_tensorflow_start_up(2)  # what TensorFlow 2.21 logs before absl is set up ignores the level
    os.environ["GRPC_VERBOSITY"] = "ERROR"
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


# Stage name -> module with `add_arguments(parser)` and `run(args)`.
STAGES = {
    "fetch": "pipeline.stages.fetch",
    "inspect": "pipeline.stages.inspect",
    "train": "pipeline.stages.train",
    "evaluate": "pipeline.stages.evaluate",
    "predict": "pipeline.stages.predict",
    "ensemble": "pipeline.stages.ensemble",
    "cv": "pipeline.stages.cv",
    "sweep": "pipeline.stages.sweep",
    "submit": "pipeline.stages.submit",
    "leaderboard": "pipeline.stages.leaderboard",
    "kernel": "pipeline.stages.kernel",
}
FILE_SYSTEM_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is reported in one line, like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see --help)\n")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's default once, and only where it says something: an option whose help names
    its default itself, a flag (on or off is the flag), and an unset (None) default get none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "default" in text
            or action.default in (None, argparse.SUPPRESS)
            or action.nargs == 0  # store_true / store_false / help
            or action.option_strings == []
        ):
            return text
        return f"{text} (default: %(default)s)"


@functools.cache  # parsing the 11 stages' sources took 40 ms a parser, which tests build hundreds of times
def _docstring(module_name: str) -> str:
    """A stage module's docstring, read from its source without importing it (and TensorFlow)."""
    origin = importlib.util.find_spec(module_name).origin
    return ast.get_docstring(ast.parse(Path(origin).read_text())) or ""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every stage. Stage modules are imported to add their arguments: all of them
    by default, else only the one named `only`, so start-up stays cheap for stages that do not
    need TensorFlow."""
    parser = _Parser(
        prog="python -m pipeline", description="petals: the stages of the flower-classification pipeline."
    )
    parser.add_argument("--quiet", action="store_true", help="log warnings and errors only")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also show other libraries' start-up and progress lines (TensorFlow, JAX, Kaggle); "
        "VERBOSE=1 in the environment does the same",
    )
    stages = parser.add_subparsers(dest="stage", required=True, metavar="STAGE", parser_class=_Parser)
    for name, module_name in STAGES.items():
        doc = _docstring(module_name)
        summary = (doc or name).strip().splitlines()[0]
        sub = stages.add_parser(name, help=summary, description=doc, formatter_class=_HelpFormatter)
        if only in (None, name):
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            sub.set_defaults(run=module.run)
    return parser


# Stages that take the same arguments and may run one after the other in one process, named
# together (`evaluate,predict`): `make train submit` starts the engine once for both.
TOGETHER = {("evaluate", "predict")}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    die_with_launcher()  # a host process of pipeline/launch.py goes when its launcher goes
    stage = next((a for a in argv if not a.startswith("-")), None)
    before_stage = argv[: argv.index(stage)] if stage else argv
    hush("--verbose" in before_stage or verbose_asked())
    names = tuple(stage.split(",")) if stage and "," in stage else (stage,)
    if len(names) > 1 and names not in TOGETHER:
        together = ", ".join(",".join(t) for t in sorted(TOGETHER))
        print(
            f"python -m pipeline: error: {stage!r}: stages run together only as {together}", file=sys.stderr
        )
        return EXIT_ERROR
    for name in names:  # each with the same arguments, the next only once the one before succeeded
        given = [*before_stage, name, *argv[len(before_stage) + 1 :]] if stage else argv
        # Only the stage asked for is imported ("" for none: `--help`, or a name argparse will refuse).
        args = build_parser(only=name if name in STAGES else "").parse_args(given)
        set_up_logging(args.quiet)
        code = run_stage(args.stage, by_size(args), args)
        if code:
            return code
    return 0


LOG_LINE = 2000  # characters of a logged line shown


class _Shown(logging.Formatter):
    """A logged line as a terminal may receive it: what a message quotes from a file or a server (a
    file name, a class name, Kaggle's words) cannot move the cursor, retitle the terminal or reverse
    the text: control characters and bidi overrides escaped (`foreign.text`), each line cut."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return text(super().formatMessage(record), LOG_LINE)


def set_up_logging(quiet: bool = False) -> None:
    """petals' own lines, bare, from INFO (WARNING with --quiet); once per process."""
    handler = logging.StreamHandler()
    handler.setFormatter(_Shown("%(message)s"))
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, handlers=[handler])
    # TensorFlow's INFO lines are not petals' (a multi-worker strategy logs every collective).
    logging.getLogger("tensorflow").setLevel(logging.WARNING)


ERROR_LINE = 4000  # characters of an error line shown; each is written to name one value, cut short


def run_stage(stage: str, function: Callable[..., Any], *arguments: Any) -> int:
    """`function(*arguments)` (a stage's `run`, or a `pipeline.api` function), its failures turned
    into one line and an exit code: 0, EXIT_ERROR, EXIT_PREEMPTED (the rerun resumes) or 130. The
    line goes through `foreign.text` whatever built it: a foreign value its maker forgot to show
    safely still cannot act on the terminal or make a second line."""
    try:
        function(*arguments)
    except PetalsError as err:
        print(f"petals {stage}: error: {text(err, ERROR_LINE)}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as err:  # a full disk, a read-only or forbidden folder, a file gone mid-run
        if err.errno not in FILE_SYSTEM_ERRORS:
            raise  # not the file system's: a bug, keep its traceback
        print(f"petals {stage}: error: {text(describe_os_error(err), ERROR_LINE)}", file=sys.stderr)
        return EXIT_ERROR
    except Preempted as err:
        print(f"petals {stage}: {err}", file=sys.stderr)
        return EXIT_PREEMPTED
    except KeyboardInterrupt:
        print(f"petals {stage}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    return 0


def by_size(args: argparse.Namespace) -> Callable[..., Any]:
    """What runs a stage: its own `run`; train, evaluate and predict through the CV stage, which
    takes them over on data their recipe calls small (pipeline/cv/auto.py)."""
    if args.stage not in ("train", "evaluate", "predict"):
        return args.run
    from pipeline.stages import cv

    return cv.by_size(args.stage, args.run)


def leave(code: int | None) -> None:
    """Exit without the interpreter's teardown. Destroying a MirroredStrategy's multi-device input
    iterator at exit can block TensorFlow for minutes on a loaded machine (seen with 8 logical CPU
    replicas; py-spy shows ~MultiDeviceIterator waiting on its thread pool). Every file a stage
    writes is closed and renamed by the time a stage returns."""
    from pipeline.core.hosts import leave_jax

    # Done, or stopped at the step every process agreed on: leave together. A failed process
    # leaves at once: the others stop on the coordination service's word.
    if code in (None, 0, EXIT_PREEMPTED):
        leave_jax()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
