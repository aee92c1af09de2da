"""Submit stage: check a submission CSV as Kaggle would, then upload it with the official client.

The file (default: the newest CSV in `submissions/`) is checked against the data dir's
`sample_submission.csv`: header, every id once, no unknown id, integer labels in range. A
file made from the embedded synthetic data is never uploaded to the real competition.
Without Kaggle credentials the stage is a dry run: it checks the file, says exactly what
would go where and how to add credentials, and exits 0 marked NOT UPLOADED. Server errors
and timeouts are retried with backoff; refusals (400, 401, 403, 404) become one line saying
what to do. Credentials are only ever named by where they were found, never shown.

A code competition (`[submission] by = "code"`) takes no uploaded CSV: the local CSV is checked
the same way, then the kernel `make kernel` generated for the competition is pushed as a new
version, waited for until it completes, and the submission file that version wrote is submitted
with the API's code-submission call. The same bytes are not pushed and submitted twice without
--force; a rerun after a stop goes on with the version already pushed.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.foreign import text
from pipeline.core.options import SubmitOptions
from pipeline.kernels.client.metadata import CODE_COMPETITION_ACCELERATOR, DEFAULT_ACCELERATOR
from pipeline.runs import sent, submission_files
from pipeline.runs.report import closing_summary
from pipeline.stages import arguments
from pipeline.tasks.competitions import task_of

log = logging.getLogger(__name__)

PATH_MAX = 4096  # a path shown whole, its escapes shown, not acted on (a file name of a shared folder)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", type=Path, default=None, help="CSV to submit (default: the newest in --submissions-dir)"
    )
    parser.add_argument(
        "--message", default=None, help="submission description (default: the entry and its val score)"
    )
    arguments.add_data_dir(parser, help="fetched data dir (its sample_submission.csv)")
    arguments.add_submissions_dir(parser)
    arguments.add_competition(parser)
    parser.add_argument(
        "--slug", default=None, help="Kaggle competition slug (default: the data's, else the spec's first)"
    )
    parser.add_argument(
        "--retries", type=int, default=SubmitOptions.retries, help="attempts on server errors and timeouts"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="upload a file again that was already uploaded (a code competition: push, submit) (FORCE=1)",
    )
    code = parser.add_argument_group("code competitions: the kernel `make kernel` generated is pushed")
    code.add_argument(
        "--kernels-dir", type=Path, default=SubmitOptions.kernels_dir, help="where kernel folders are"
    )
    code.add_argument(
        "--kernel", default=None, help="kernel folder name (default: petals-<competition>-<recipe>)"
    )
    code.add_argument(
        "--recipe", default=SubmitOptions.recipe, help="the kernel's recipe, for its default name"
    )
    code.add_argument(
        "--accelerator",
        default=None,
        help=f"the kernel's accelerator, which resolves --recipe auto (default: {DEFAULT_ACCELERATOR}; "
        f"a code competition: {CODE_COMPETITION_ACCELERATOR})",
    )
    code.add_argument(
        "--poll-seconds",
        type=float,
        default=SubmitOptions.poll_seconds,
        help="seconds between status checks of the version",
    )
    code.add_argument(
        "--wait-seconds",
        type=float,
        default=SubmitOptions.wait_seconds,
        help="longest wait for the version to complete (default 13 h: a session's limit and a queue)",
    )


@dataclass(frozen=True)
class Checked:
    """The local submission CSV, checked as Kaggle would, and where and how it would be submitted."""

    path: Path
    summary: object  # competition.submission's summary: rows, bytes, classes used
    digest: str
    provenance: dict
    entry: str
    slug: str
    message: str
    synthetic: bool  # made from the embedded synthetic dataset (Kaggle cannot score it)
    real_rows: int | None
    origin: str | None


def run(args: argparse.Namespace) -> None:
    from pipeline.core.paths import check_name

    if args.kernel is not None:  # KERNEL=: a folder under --kernels-dir, never a path out of it
        check_name(args.kernel, "--kernel")
    submit(options.from_args(SubmitOptions, args))


def submit(opts: SubmitOptions) -> None:
    """Check the competition's submission, then send it (a CSV, or a kernel version's output); a
    dry run without credentials."""
    from competition import load_spec

    spec = load_spec(opts.competition)
    checked = check_local(opts, spec)
    log.info("submit: %s is a valid submission", checked.path)
    if opts.retries < 1:
        raise PetalsError(f"--retries {opts.retries}: must be at least 1")
    if spec.code_competition:
        submit_kernel(opts, spec, checked)
    else:
        submit_csv(opts, spec, checked)


def check_local(opts: SubmitOptions, spec) -> Checked:
    """The CSV (given, else the newest for the competition) checked against the data's sample."""
    from competition.submission import SubmissionError
    from pipeline.core.files import sha256
    from pipeline.data.manifest import read_manifest
    from pipeline.runs.submission_files import sample_ids
    from pipeline.tasks.competitions import check_submission

    path = opts.file or submission_files.newest_submission(opts.submissions_dir, spec.name)
    manifest = read_manifest(opts.data_dir)
    if manifest is None:
        raise PetalsError(
            f"{opts.data_dir}: no manifest.json; checking {path} needs the fetched data's "
            f"{spec.sample_submission} (pass --data-dir / DATA=)"
        )
    # Predictions of the embedded synthetic data, however it was fetched, have the wrong test set.
    real_rows = spec.split_counts.get("test")
    synthetic = manifest.get("source") == "synthetic"
    try:
        summary = check_submission(path, spec, sample_ids(opts.data_dir, spec))
    except SubmissionError as err:
        hint = (
            f" ({opts.data_dir} holds the embedded synthetic dataset)"
            if synthetic and "not in the test set" in str(err)
            else ""
        )
        raise PetalsError(f"{err}{hint}") from None
    if real_rows and summary.rows != real_rows:
        synthetic = True
    digest = sha256(path)
    provenance = submission_files.sidecar(path, digest)
    entry = provenance.get("entry", path.stem)
    data_slug = manifest.get("slug")  # the competition the data came from, if it is one of the spec's
    return Checked(
        path=path,
        summary=summary,
        digest=digest,
        provenance=provenance,
        entry=entry,
        slug=opts.slug or (data_slug if data_slug in spec.slugs else spec.default_slug),
        message=opts.message or default_message(entry, provenance),
        synthetic=synthetic,
        real_rows=real_rows,
        origin=manifest.get("origin"),
    )


def default_message(entry: str, provenance: dict) -> str:
    metric = provenance.get("metric", "macro_f1")
    score = provenance.get(f"val_{metric}")
    shown = "F1" if metric == "macro_f1" else metric.replace("_", "-")
    return f"petals {entry}" + (f" val-{shown} {score:.4f}" if isinstance(score, float) else "")


def submit_csv(opts: SubmitOptions, spec, checked: Checked) -> None:
    """Upload the checked CSV (a file competition); a dry run without credentials."""
    from pipeline.core import kaggle_client, kaggle_submissions
    from pipeline.core.files import write_json
    from pipeline.runs import leaderboard

    path, summary, digest, slug, message = (
        checked.path, checked.summary, checked.digest, checked.slug, checked.message,
    )  # fmt: skip
    provenance, entry, synthetic = checked.provenance, checked.entry, checked.synthetic
    page = f"https://www.kaggle.com/competitions/{slug}"
    described = task_of(spec).describe_submission(spec, summary)
    what = (
        f"{text(path, PATH_MAX)} ({summary.rows} rows, {described}, {summary.bytes} bytes, "
        f"sha256 {digest[:12]}) to competition {slug!r} ({page}/submissions) with message {message!r}"
    )
    credentials = kaggle_client.find_credentials()
    if credentials is None:
        print(f"DRY RUN, NOT UPLOADED: would upload {what}.")
        if synthetic:
            print(
                "  It was made from the embedded synthetic dataset, which Kaggle cannot score: petals will "
                "refuse to upload it. Fetch the real data first (make fetch SOURCE=kaggle FORCE=1), "
                "then train again."
            )
        print(f"  To upload: {kaggle_client.CREDENTIALS_HELP}; then rerun `make submit`.")
        print(
            closing_summary(
                opts.submissions_dir, opts.competition, spec, provenance, path, summary.rows, None, synthetic
            )
        )
        return
    if synthetic and kaggle_client.is_production():
        raise PetalsError(
            f"{path} was made from the embedded synthetic dataset ({checked.origin}, "
            f"{summary.rows} test rows where {slug!r} has {checked.real_rows}): refusing to upload it; "
            "fetch the real data (make fetch SOURCE=kaggle) and train again"
        )
    board = leaderboard.board_file(opts.submissions_dir, spec.name)
    done = sent.uploaded_before(board, entry, digest)
    if done and not opts.force:  # a rerun: Kaggle counts every upload against the day's limit
        # the ref is the board's, a CSV of the submissions folder: shown as text, as every ref here
        print(
            f"ALREADY UPLOADED {text(path, PATH_MAX)} to {slug!r} (ref {text(done, 40)}); "
            "FORCE=1 (--force) uploads it again"
        )
        return
    # An upload Kaggle accepted is recorded once even if this process is killed before writing its
    # row: the intent is written first, and a rerun that finds it asks Kaggle before uploading again.
    intent = path.with_name(f".{path.name}.submitting.json")
    ref, said = sent.already_submitted(intent, path, digest, slug, message), "found on Kaggle, not sent again"
    if ref is None:
        log.info("submit: uploading %s (credentials from %s)", what, credentials)
        write_json(intent, {"sha256": digest, "slug": slug, "message": message, "started": leaderboard.now()})
        answer = kaggle_submissions.submit_file(path, slug, message, retries=opts.retries)
        ref, said = answer.ref, text(answer.message or "accepted")
    sent.recorded(board, entry, str(path), ref, digest, intent)
    print(
        f"UPLOADED {text(path, PATH_MAX)} to {slug!r}: {said} (ref {text(ref, 40)}); "
        "`make leaderboard-sync` fetches its public score once Kaggle has scored it"
    )
    print(
        closing_summary(
            opts.submissions_dir, opts.competition, spec, provenance, path, summary.rows, slug, False
        )
    )


def submit_kernel(opts: SubmitOptions, spec, checked: Checked) -> None:
    """A code competition: push the kernel as a new version, wait until it completes, then submit the
    file it wrote (pipeline/kernels/client/submission.py, resumable); a dry run without credentials."""
    from pipeline.core import kaggle_client
    from pipeline.kernels.client.metadata import (
        METADATA,
        code_kernel,
        content_digest,
        kernel_folder,
        resolve_accelerator,
    )
    from pipeline.kernels.client.submission import KernelVersion
    from pipeline.runs import leaderboard

    slug, file_name = checked.slug, spec.submission_file
    accelerator = resolve_accelerator(opts.accelerator, spec)
    folder = kernel_folder(opts.kernels_dir, opts.kernel, opts.recipe, accelerator, spec.name)
    dry = kaggle_client.find_credentials() is None
    if dry and not (folder / METADATA).is_file():  # a dry run needs no kernel yet: say how to make one
        kernel, digest = f"<you>/{folder.name}", None
        print(
            f"DRY RUN, NOT SUBMITTED: no kernel at {folder} yet. To submit: make kernel "
            f"COMPETITION={spec.name} ACCELERATOR={accelerator} "
            "(weights from an attached dataset: DATASETS=), "
            "then `make submit` pushes it, waits for it and submits its output."
        )
    else:
        folder, meta = code_kernel(folder, spec, slug)
        kernel, digest = meta["id"], content_digest(folder)

    def finished(submitted_to: str | None) -> str:
        return closing_summary(
            opts.submissions_dir, opts.competition, spec, checked.provenance, checked.path,
            checked.summary.rows, submitted_to, synthetic=False, code=True,
        )  # fmt: skip

    if dry:
        shown = f"{folder}, sha256 {digest[:12]}" if digest else str(folder)
        print(
            f"DRY RUN, NOT SUBMITTED: would push kernel {kernel} ({shown}) as a new version and, once it "
            f"completes, submit its {file_name} to competition {slug!r} "
            f"(https://www.kaggle.com/competitions/{slug}/submissions) with message {checked.message!r}."
        )
        described = task_of(spec).describe_submission(spec, checked.summary)
        print(
            f"  {checked.path} ({checked.summary.rows} rows, {described}) passes the "
            f"checks; on Kaggle the kernel writes its {file_name} the same way, from the test set Kaggle "
            "mounts."
        )
        print(f"  To submit: {kaggle_client.CREDENTIALS_HELP}; then rerun `make submit`.")
        print(finished(None))
        return
    board = leaderboard.board_file(opts.submissions_dir, spec.name)
    done = sent.uploaded_before(board, checked.entry, digest)
    if done and not opts.force:  # a rerun: a version is hours of accelerator time
        print(
            f"ALREADY SUBMITTED kernel {kernel} (sha256 {digest[:12]}) to {slug!r} (ref {text(done, 40)}); "
            "FORCE=1 (--force) pushes and submits it again"
        )
        return
    version = KernelVersion(folder, kernel, digest, slug, checked.message, file_name, opts.submissions_dir)
    number, ref, said = version.run(opts.force, opts.poll_seconds, opts.wait_seconds, opts.retries)
    sent.recorded(board, checked.entry, f"{kernel} version {number}", ref, digest, version.intent)
    print(
        f"SUBMITTED {file_name} of kernel {kernel} version {number} to {slug!r}: {said} "
        f"(ref {text(ref, 40)}); "
        f"`make leaderboard-sync COMPETITION={spec.name}` fetches its public score once Kaggle has scored it"
    )
    print(finished(f"{slug} as kernel {kernel} version {number}"))
