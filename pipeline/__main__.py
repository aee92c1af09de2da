"""`python -m pipeline <stage>`: the one entry point the Makefile calls."""

import logging
import os
import sys

# The import stays inside the guard: spawned worker processes re-import this
# module and must not pay for the stages' TensorFlow imports.
if __name__ == "__main__":
    from pipeline.cli import main

    code = main()
    # Leave without the interpreter's teardown. Destroying a MirroredStrategy's multi-device
    # input iterator at exit can block TensorFlow for minutes on a loaded machine (seen with
    # 8 logical CPU replicas; py-spy shows ~MultiDeviceIterator waiting on its thread pool).
    # Every file a stage writes is closed and renamed by the time main() returns.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
