"""What was sent to Kaggle, recorded so that nothing is sent twice: the leaderboard row of an
accepted submission (what, its ref and sha256), and an intent file written before each step, so a
rerun after a stop asks Kaggle (or goes on with the kernel version already pushed) instead of
sending the same bytes again."""

from __future__ import annotations

import logging
from pathlib import Path

from pipeline.core.foreign_files import json_record

log = logging.getLogger(__name__)


def recorded(board: Path, entry: str, submission: str, ref, digest: str, intent: Path) -> None:
    """The accepted submission on the leaderboard (what was sent, its ref and sha256); then the
    intent file goes: a rerun finds it there and sends nothing."""
    from pipeline.runs import leaderboard

    leaderboard.update(
        board,
        entry,
        submission=submission,
        submitted_at=leaderboard.now(),
        submission_ref=str(ref) if ref else None,
        submission_sha256=digest,
    )
    intent.unlink(missing_ok=True)


def read_intent(intent: Path, record: dict) -> dict:
    """What an earlier, stopped submit of these very bytes recorded (its version), or {}."""
    earlier = json_record(intent, "submit's intent file")
    return earlier if all(earlier.get(k) == v for k, v in record.items()) else {}


def uploaded_before(board: Path, entry: str, digest: str) -> str | None:
    """The ref under which these very bytes were uploaded for `entry`, or None."""
    from pipeline.runs import leaderboard

    table = leaderboard.read(board)
    rows = table[(table["entry"] == entry) & (table["submission_sha256"].astype(str) == digest)]
    refs = rows["submission_ref"].dropna().astype(str)
    return refs.iloc[0] if len(refs) else None


def already_submitted(intent: Path, path: Path, digest: str, slug: str, message: str) -> str | None:
    """The ref of this very file's submission when an earlier submit of it was stopped after it
    began uploading (its intent file is there) and Kaggle lists it; None when it must be sent."""
    from pipeline.core import kaggle_submissions

    earlier = json_record(intent, "submit's intent file")
    if (earlier.get("sha256"), earlier.get("slug"), earlier.get("message")) != (digest, slug, message):
        return None
    found = kaggle_submissions.find_submission(slug, path.name, message)
    if found is None:
        return None
    log.info("submit: an earlier submit of %s was stopped after Kaggle accepted it (ref %s)", path, found.ref)
    return str(found.ref)
