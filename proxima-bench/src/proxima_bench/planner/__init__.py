"""Capacity planning: ``plan`` (``python -m proxima_bench.planner``), ``shape_model``."""
