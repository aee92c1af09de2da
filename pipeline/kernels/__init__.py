"""Kaggle kernels: what their folder holds (`metadata`), what they can run (`recipe_check`), and
the calls that push, follow and collect them (`remote`). `pipeline/stages/kernel.py` generates
them; `pipeline/stages/submit.py` pushes one to submit to a code competition."""
