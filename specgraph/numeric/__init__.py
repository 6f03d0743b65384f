"""Numeric comparison: run both sides layer by layer, forward and backward, and compare."""
