"""The one exception type the CLI turns into a single actionable line."""


class PetalsError(Exception):
    """A failure the user can act on; its message is printed as one line, without a traceback."""


def first_line(err: BaseException) -> str:
    """The reason an error gives, in one line (TensorFlow's `{{function_node ...}}` prefix dropped)."""
    text = (getattr(err, "message", None) or str(err)).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line.split("}} ", 1)[-1].strip()
