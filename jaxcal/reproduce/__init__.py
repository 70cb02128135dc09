"""Reproductions of published studies, shared by ``jaxcal reproduce`` and ``experiments/``."""
