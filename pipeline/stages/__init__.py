"""The stages the Makefile calls, one module each (`python -m pipeline <stage>`): thin drivers."""
