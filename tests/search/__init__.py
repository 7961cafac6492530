"""Tests of the search environment, its scoring and its retrievers."""
