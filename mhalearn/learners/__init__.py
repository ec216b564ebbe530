"""Learners of a multi-head attention layer, one module per family (DESIGN.md §4)."""
