"""The target parts of tasks: what an example is labelled with (one class, several labels, a number)."""
