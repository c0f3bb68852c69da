"""Attention kernel timing on a GPU (``bench``) and its tables (``report``)."""
