"""Submit stage: check a submission CSV as Kaggle would, then upload it with the official client.

The file (default: the newest CSV in `submissions/`) is checked against the data dir's
`sample_submission.csv`: header, every id once, no unknown id, integer labels in range. A
file made from the embedded synthetic data is never uploaded to the real competition.
Without Kaggle credentials the stage is a dry run: it checks the file, says exactly what
would go where and how to add credentials, and exits 0 marked NOT UPLOADED. Server errors
and timeouts are retried with backoff; refusals (400, 401, 403, 404) become one line saying
what to do. Credentials are only ever named by where they were found, never shown.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pandas as pd

from pipeline.core.errors import PetalsError

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", type=Path, default=None, help="CSV to submit (default: the newest in --submissions-dir)"
    )
    parser.add_argument(
        "--message", default=None, help="submission description (default: the entry and its val score)"
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path("data"), help="fetched data dir (its sample_submission.csv)"
    )
    parser.add_argument("--submissions-dir", type=Path, default=Path("submissions"), help="where CSVs are")
    parser.add_argument("--competition", default="flowers", help="competition spec under competition/")
    parser.add_argument(
        "--slug", default=None, help="Kaggle competition slug (default: the data's, else the spec's first)"
    )
    parser.add_argument("--retries", type=int, default=3, help="attempts on server errors and timeouts")
    parser.add_argument(
        "--force", action="store_true", help="upload a file again that was already uploaded (FORCE=1)"
    )


def run(args: argparse.Namespace) -> None:
    from competition import load_spec
    from competition.submission import SubmissionError, check_submission
    from pipeline.core import kaggle_client
    from pipeline.core.files import sha256, write_json
    from pipeline.data.manifest import read_manifest
    from pipeline.stages import leaderboard
    from pipeline.stages.predict import sample_ids

    spec = load_spec(args.competition)
    path = args.file or newest_submission(args.submissions_dir, spec.name)
    manifest = read_manifest(args.data_dir)
    if manifest is None:
        raise PetalsError(
            f"{args.data_dir}: no manifest.json; checking {path} needs the fetched data's "
            f"{spec.sample_submission} (pass --data-dir / DATA=)"
        )
    # Predictions of the embedded synthetic data, however it was fetched, have the wrong test set.
    real_rows = spec.split_counts.get("test")
    synthetic = manifest.get("source") == "synthetic"
    try:
        summary = check_submission(path, spec, sample_ids(args.data_dir, spec))
    except SubmissionError as err:
        hint = (
            f" ({args.data_dir} holds the embedded synthetic dataset)"
            if synthetic and "not in the test set" in str(err)
            else ""
        )
        raise PetalsError(f"{err}{hint}") from None
    if real_rows and summary.rows != real_rows:
        synthetic = True
    digest = sha256(path)
    provenance = sidecar(path, digest)
    entry = provenance.get("entry", path.stem)
    data_slug = manifest.get("slug")  # the competition the data came from, if it is one of the spec's
    slug = args.slug or (data_slug if data_slug in spec.slugs else spec.default_slug)
    message = args.message or default_message(entry, provenance)
    page = f"https://www.kaggle.com/competitions/{slug}"
    what = (
        f"{path} ({summary.rows} rows, {predicted(spec, summary)}, {summary.bytes} bytes, "
        f"sha256 {digest[:12]}) to competition {slug!r} ({page}/submissions) with message {message!r}"
    )
    log.info("submit: %s is a valid submission", path)
    credentials = kaggle_client.find_credentials()
    if credentials is None:
        print(f"DRY RUN, NOT UPLOADED: would upload {what}.")
        if synthetic:
            print(
                "  It was made from the embedded synthetic dataset, which Kaggle cannot score: petals will "
                "refuse to upload it. Fetch the real data first (make fetch SOURCE=kaggle), then train again."
            )
        print(f"  To upload: {kaggle_client.CREDENTIALS_HELP}; then rerun `make submit`.")
        print(
            closing_summary(args.submissions_dir, spec.name, provenance, path, summary.rows, None, synthetic)
        )
        return
    if synthetic and kaggle_client.is_production():
        raise PetalsError(
            f"{path} was made from the embedded synthetic dataset ({manifest.get('origin')}, "
            f"{summary.rows} test rows where {slug!r} has {real_rows}): refusing to upload it; "
            "fetch the real data (make fetch SOURCE=kaggle) and train again"
        )
    if args.retries < 1:
        raise PetalsError(f"--retries {args.retries}: must be at least 1")
    board = leaderboard.board_file(args.submissions_dir, spec.name)
    done = _uploaded_before(board, entry, digest)
    if done and not args.force:  # a rerun: Kaggle counts every upload against the day's limit
        print(f"ALREADY UPLOADED {path} to {slug!r} (ref {done}); FORCE=1 (--force) uploads it again")
        return
    # An upload Kaggle accepted is recorded once even if this process is killed before writing its
    # row: the intent is written first, and a rerun that finds it asks Kaggle before uploading again.
    intent = path.with_name(f".{path.name}.submitting.json")
    ref, said = _already_submitted(intent, path, digest, slug, message), "found on Kaggle, not sent again"
    if ref is None:
        log.info("submit: uploading %s (credentials from %s)", what, credentials)
        write_json(intent, {"sha256": digest, "slug": slug, "message": message, "started": leaderboard.now()})
        answer = kaggle_client.submit_file(path, slug, message, retries=args.retries)
        ref, said = answer.ref, answer.message or "accepted"
    leaderboard.update(
        board,
        entry,
        submission=str(path),
        submitted_at=leaderboard.now(),
        submission_ref=str(ref) if ref else None,
        submission_sha256=digest,
    )
    intent.unlink(missing_ok=True)
    print(
        f"UPLOADED {path} to {slug!r}: {said} (ref {ref}); "
        "`make leaderboard-sync` fetches its public score once Kaggle has scored it"
    )
    print(closing_summary(args.submissions_dir, spec.name, provenance, path, summary.rows, slug, False))


def _uploaded_before(board: Path, entry: str, digest: str) -> str | None:
    """The ref under which these very bytes were uploaded for `entry`, or None."""
    from pipeline.stages import leaderboard

    table = leaderboard.read(board)
    rows = table[(table["entry"] == entry) & (table["submission_sha256"].astype(str) == digest)]
    refs = rows["submission_ref"].dropna().astype(str)
    return refs.iloc[0] if len(refs) else None


def _already_submitted(intent: Path, path: Path, digest: str, slug: str, message: str) -> str | None:
    """The ref of this very file's submission when an earlier submit of it was stopped after it
    began uploading (its intent file is there) and Kaggle lists it; None when it must be sent."""
    from pipeline.core import kaggle_client

    try:
        earlier = json.loads(intent.read_text())
    except (OSError, ValueError):
        return None
    if (earlier.get("sha256"), earlier.get("slug"), earlier.get("message")) != (digest, slug, message):
        return None
    found = kaggle_client.find_submission(slug, path.name, message)
    if found is None:
        return None
    log.info("submit: an earlier submit of %s was stopped after Kaggle accepted it (ref %s)", path, found.ref)
    return str(found.ref)


def predicted(spec, summary) -> str:
    if spec.submission_value == "probability":
        return f"P({spec.classes[1]}) per row"
    return f"{summary.classes_used} classes predicted"


def closing_summary(
    submissions_dir: Path,
    competition: str,
    provenance: dict,
    path: Path,
    rows: int,
    uploaded: str | None,
    synthetic: bool,
) -> str:
    """The main job's last lines: what ran, how it scored, where its files are, what to do next."""
    from pipeline.stages import leaderboard

    board = leaderboard.read(leaderboard.board_file(submissions_dir, competition))
    table = leaderboard.ranked(board, competition)
    column, metric = leaderboard.score_column(competition)
    entry = provenance.get("entry", path.stem)
    lines = ["", "petals: done."]
    mine = board[board["entry"] == entry]
    if not mine.empty:
        row, rank = mine.iloc[0], int(table.loc[table["entry"] == entry, "rank"].iloc[0])
        if row["kind"] == "run":  # columns may be empty (a row from an older petals): shown as "?"
            size, epochs = (_whole(row[c]) for c in ("image_size", "epochs"))
            at = "" if size == "?" else f" at {size} px"  # texts have no size
            what = f"recipe {row['recipe']}: {row['backbone']}{at}, {epochs} epochs on {row['backend']}"
        else:
            what = f"ensemble of {row['members']}"
        lines.append(f"  ran      {what}")
        score = pd.to_numeric(row[column], errors="coerce")
        shown = "not scored" if pd.isna(score) else f"{score:.4f}"
        lines.append(
            f"  scored   val {metric.title} {shown}, rank {rank} of {len(table)} on the offline leaderboard"
        )
    lines.append(f"  run      {provenance.get('run_dir', entry)}")
    status = f"uploaded to {uploaded}" if uploaded else "NOT UPLOADED (dry run)"
    picked = "" if competition == "flowers" else f" COMPETITION={competition}"
    lines.append(f"  wrote    {path} ({rows} rows), {status}")
    if uploaded:
        step = (
            f"`make leaderboard-sync{picked}` once Kaggle has scored it; "
            f"`make leaderboard{picked}` ranks every run"
        )
    elif synthetic:
        step = f"real data: Kaggle credentials, then `make fetch SOURCE=kaggle FORCE=1 train submit{picked}`"
    else:
        step = f"Kaggle credentials, then `make submit{picked}`; `make leaderboard{picked}` ranks every run"
    lines.append(f"  next     {step}")
    return "\n".join(lines)


def _whole(value) -> str:
    number = pd.to_numeric(value, errors="coerce")
    return "?" if pd.isna(number) else str(int(number))


def newest_submission(submissions_dir: Path, competition: str = "flowers") -> Path:
    """The newest CSV predict or ensemble wrote for `competition` (one without a record: any)."""
    from pipeline.stages import leaderboard

    def made_for(path: Path) -> str:
        try:
            return json.loads(path.with_suffix(".json").read_text()).get("competition", competition)
        except (OSError, json.JSONDecodeError):
            return competition

    files = [
        p for p in submissions_dir.glob("*.csv") if not leaderboard.is_board(p) and made_for(p) == competition
    ]
    if not files:
        raise PetalsError(
            f"{submissions_dir}: no {competition} submission CSV; run `make predict` (or pass FILE=)"
        )
    return max(files, key=lambda p: p.stat().st_mtime)


def sidecar(path: Path, digest: str) -> dict:
    """What `predict`/`ensemble` recorded about the file, if it is still the file they wrote."""
    meta = path.with_suffix(".json")
    try:
        recorded = json.loads(meta.read_text()) if meta.is_file() else {}
    except json.JSONDecodeError:
        return {}
    return recorded if recorded.get("csv_sha256") == digest else {}


def default_message(entry: str, provenance: dict) -> str:
    metric = provenance.get("metric", "macro_f1")
    score = provenance.get(f"val_{metric}")
    shown = "F1" if metric == "macro_f1" else metric.replace("_", "-")
    return f"petals {entry}" + (f" val-{shown} {score:.4f}" if isinstance(score, float) else "")
