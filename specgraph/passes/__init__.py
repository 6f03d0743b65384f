"""Canonicalization: passes that make equivalent models identical graphs.

Each pass is a small named unit in its own module (see its docstring for what it requires
and ensures), is exact, and returns ``PassResult(graph, modified)`` (``rewrite``: the
Rewriter the passes share; ``regions``, ``cones`` and ``slices``: the region proofs the
raising rules use). ``manager`` runs them to a fixed point, verifying the graph after every
pass (``canonicalize``). ``boundary`` is the model-level pass: it moves layouts to the
model's inputs, outputs and parameters (``canonicalize_model``, on a TracedModel).
"""

from __future__ import annotations

from specgraph.passes.boundary import canonicalize_model
from specgraph.passes.manager import DEFAULT_PASSES, canonicalize, run_passes
from specgraph.passes.rewrite import PassResult

__all__ = ["PassResult", "DEFAULT_PASSES", "canonicalize", "canonicalize_model", "run_passes"]
