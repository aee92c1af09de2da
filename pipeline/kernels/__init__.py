"""Kaggle kernels, all of it: a recipe's kernel generated and checked (`generate`, `bundle`,
`check`, `recipe_check`), what its folder holds (`metadata`), the calls that push, follow and collect
it (`remote`), one kernel per fold fanned out within Kaggle's limits (`fanout`), and a code
competition's submission through it (`submission`). The script a kernel
runs is `pipeline/kernel_main.py`: it drives the stages, so it sits above them with the other entry
points. `kernels/` holds only the generated kernels; `tests/kernel_emulate.py` runs one as Kaggle's
TPU image would.
"""
