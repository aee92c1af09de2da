"""`python -m pipeline <stage>`: the one entry point the Makefile calls."""

# The import stays inside the guard: spawned worker processes re-import this
# module and must not pay for the stages' TensorFlow imports.
if __name__ == "__main__":
    from pipeline.cli import leave, main

    leave(main())
