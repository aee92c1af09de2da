"""What makes, pushes, follows and collects Kaggle kernels from here (pipeline/kernels/__init__.py)."""
