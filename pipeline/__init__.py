"""petals pipeline: one module per stage the Makefile chains (`python -m pipeline <stage>`).

Importing this package must stay cheap and TensorFlow-free: the synthetic-data
workers import it in fresh processes.
"""

__version__ = "0.1.0"
