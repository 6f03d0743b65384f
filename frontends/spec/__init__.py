"""The paper-spec frontend: a spec ``.yaml`` file as a traced model.

``specgraph.spec`` reads, validates and compiles the spec (the core, no framework); the
tracer here gives the compiled graph seeded weights and example inputs, and its outputs come
from the float64 reference interpreter: a spec has no native program of its own.
"""

from __future__ import annotations

from specgraph.frontends.spec.tracer import FRAMEWORK, make_inputs, make_weights, trace_file

__all__ = ["trace_file", "make_inputs", "make_weights", "FRAMEWORK"]
