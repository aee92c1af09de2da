"""Kaggle kernels, all of it, in two layers that the stages sit between.

- `script/`: what runs on Kaggle. `main.py` is the kernel's script (a template `make kernel`
  fills with its settings and the bundled packages); it drives the stages, so it sits above them
  with the other entry points, and `share.py` trains a fan-out kernel's folds or trials.
- `client/`: what runs here, below the stages: a recipe's kernel generated and checked
  (`generate`, `bundle`, `check`, `recipe_check`), what its folder holds (`metadata`), the private
  datasets it attaches (`wheels`, `weights`, `private_datasets`), the calls that push, follow and
  collect it (`remote`), one kernel per fold or per share of trials fanned out within Kaggle's limits
  (`fanout`, `shares`), and a code competition's submission through it (`submission`).

The top-level `kernels/` folder holds only the generated kernels; `tests/kernel_emulate.py` runs
one as Kaggle's TPU image would.
"""
