"""The one exception type the CLI turns into a single actionable line."""


class PetalsError(Exception):
    """A failure the user can act on; its message is printed as one line, without a traceback."""
