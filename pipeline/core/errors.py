"""The one exception type the CLI turns into a single actionable line, and the exit codes every
process agrees on (the CLI, the multi-process launcher, a preempted trainer)."""

EXIT_ERROR = 2  # a PetalsError: one line, nothing to resume
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: training stopped on a signal or its time limit; the rerun resumes
# What a process says when it stops because another went away: a consequence, never the cause
# (the multi-process launcher names the process whose failure came first).
PEER_GONE = "another worker went away"


class PetalsError(Exception):
    """A failure the user can act on; its message is printed as one line, without a traceback."""


class Preempted(Exception):
    """Training stopped on a signal or its time limit after saving a checkpoint at the step it
    reached (pipeline.modeling.preemption); the CLI exits with its own code, the rerun resumes."""


def describe_os_error(err: OSError) -> str:
    """A file-system failure as one line that names the file and what to do: a full disk says how
    much is free there, a read-only or forbidden place says so."""
    import errno
    import shutil
    from pathlib import Path

    name = err.filename or "a file"
    reason = err.strerror or first_line(err)
    if err.errno == errno.ENOSPC and err.filename:
        place = Path(err.filename).parent
        while not place.exists() and place != place.parent:
            place = place.parent
        free = shutil.disk_usage(place).free
        free_mib = f"{free / 2**20:.1f} MiB free in {place}"
        return f"{name}: no space left on the device ({free_mib}); free some and rerun"
    hints = {
        errno.EACCES: "let this user write there, or choose another folder",
        errno.EPERM: "let this user write there, or choose another folder",
        errno.EROFS: "choose a writable folder (e.g. --runs-dir, DATA=)",
        errno.ENOENT: "it is gone: was it deleted or moved while the stage ran?",
        errno.EDQUOT: "over the disk quota; free some and rerun",
    }
    hint = hints.get(err.errno)
    return f"{name}: {reason}" + (f"; {hint}" if hint else "")


def first_line(err: BaseException) -> str:
    """The reason an error gives, in one line (TensorFlow's `{{function_node ...}}` prefix dropped)."""
    text = (getattr(err, "message", None) or str(err)).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line.split("}} ", 1)[-1].strip()
