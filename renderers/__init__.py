"""Renderers: one printer per output format, over the public report types only."""
