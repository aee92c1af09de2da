"""A code competition's submission, from a kernel: push it as a new version, wait until the version
completes, submit the file it wrote with the API's code-submission call.

Each step is recorded before it is taken (pipeline/runs/sent.py's intent file), so a rerun after a
stop goes on where it was: with the version already pushed (a version is hours of accelerator
time), and asking Kaggle before submitting it again. A version that failed is over: the intent
goes, and a rerun pushes a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core import kaggle_submissions
from pipeline.core.files import write_json
from pipeline.core.foreign import text
from pipeline.kernels.client import remote
from pipeline.kernels.client.check import check
from pipeline.runs import leaderboard
from pipeline.runs.sent import read_intent


@dataclass
class KernelVersion:
    """The kernel in `folder` (`kernel` on Kaggle, its files' sha256 `digest`) submitted to `slug`."""

    folder: Path
    kernel: str
    digest: str
    slug: str
    message: str
    file_name: str  # what the kernel writes: the competition's submission file
    submissions_dir: Path
    record: dict = field(init=False)

    def __post_init__(self) -> None:
        self.record = {
            "sha256": self.digest,
            "slug": self.slug,
            "message": self.message,
            "kernel": self.kernel,
        }

    @property
    def intent(self) -> Path:
        return self.submissions_dir / f".{self.folder.name}.submitting.json"

    def run(
        self, force: bool, poll_seconds: float, wait_seconds: float, retries: int
    ) -> tuple[int, str, str]:
        """Push (or find pushed), wait, submit (or find submitted): (version, ref, what Kaggle said)."""
        earlier = {} if force else read_intent(self.intent, self.record)
        version = self._pushed(earlier.get("version"))
        self._waited(version, poll_seconds, wait_seconds)
        ref, said = self._submitted(version, bool(earlier.get("submitting")), retries)
        return version, ref, said

    def _pushed(self, version: int | None) -> int:
        if version:
            print(
                f"kernel {self.kernel} version {version} was pushed by an earlier `make submit`: "
                "waiting for it"
            )
            return version
        check(self.folder)  # what `make kernel-push` checks before a push
        version = remote.push(self.folder)
        self.submissions_dir.mkdir(parents=True, exist_ok=True)
        write_json(self.intent, {**self.record, "version": version, "started": leaderboard.now()})
        return version

    def _waited(self, version: int, poll_seconds: float, wait_seconds: float) -> None:
        try:
            remote.wait_for_kernel(
                self.kernel, version, poll_seconds=poll_seconds, limit_seconds=wait_seconds
            )
        except remote.KernelFailed:
            self.intent.unlink(missing_ok=True)  # that version is over: a rerun pushes a new one
            raise

    def _submitted(self, version: int, submitting_before: bool, retries: int) -> tuple[str, str]:
        if submitting_before:  # stopped while submitting: Kaggle may have it already
            found = kaggle_submissions.find_submission(self.slug, self.file_name, self.message)
            if found is not None:
                return str(found.ref), "found on Kaggle, not sent again"  # a whole number, checked
        write_json(
            self.intent, {**self.record, "version": version, "submitting": True, "started": leaderboard.now()}
        )
        answer = kaggle_submissions.submit_code(
            self.slug, self.kernel, version, self.file_name, self.message, retries=retries
        )
        return answer.ref, text(answer.message or "accepted")  # the ref is shown escaped where printed
