"""Raise a written-out weight normalization, g·v/‖v‖ over some axes of a parameter v with a
gain parameter g, to ``weight_norm`` (what PyTorch's ``weight_norm`` parametrization traces
to): Flax writes ``v / norm(v) * g``, TF ``l2_normalize(v) * g``, i.e.
``v·rsqrt(max(Σv², 1e-12))·g``.

The region computing the weight from exactly two parameters is proved against
``weight_norm`` on random values of both (``regions.agrees``), for each axis set PyTorch's
``dim`` can give (every axis but one, or all of them) that the gain's size fits; the first
that agrees is raised. TF's clamp of Σv² at 1e-12 is a guard against a zero column, as
Flax's ``max(0, var)`` is in its LayerNorm: on any v it changes nothing unless a norm is
below 1e-6, so the proof accepts it, while another formula (a missing square root, a norm
over other axes, a gain added instead of multiplied) fails and stays written out.

Requires: a verified graph. Ensures: each rewrite proved on random parameter values in
float64; the gain is read in ``weight_norm``'s layout (a reshape of it where the model
stores it otherwise, such as TF's ``[k, 1, 1]`` against PyTorch's ``[1, 1, k]``).
"""

from __future__ import annotations

from math import prod

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.regions import agrees, params_in, region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseWeightNormPass"]

_LIMIT = 12  # nodes: Σv², a guard, a root, a division or product, the gain, reshapes


def _axis_sets(v: Value, g: Value) -> list[tuple[int, ...]]:
    """The axes of v a norm could run over, given g's size: every axis but one, or all."""
    every = tuple(range(v.rank))
    sets = [tuple(a for a in every if a != d) for d in every if v.shape[d] == g.size]
    return sets + [every] if g.size == 1 else sets


def _rule(rw: Rewriter, node: Node) -> bool:
    out = node.outputs[0]
    if node.op not in ("mul", "div") or not all(rw.is_fixed(v) for v in node.inputs):
        return False
    rw.keep(node)  # the region's root must be visible to the region walk
    nodes = region(rw, out, [], limit=_LIMIT)
    if nodes is None:
        return True
    params = params_in(rw, nodes)
    if len(params) != 2:
        return True
    for v, g in (params, params[::-1]):
        if v.shape != out.shape or g.size > v.size or g.dtype != v.dtype:
            continue
        for axes in _axis_sets(v, g):
            kept = tuple(1 if i in axes else s for i, s in enumerate(v.shape))
            if not _gain_reads_as(g, kept) or not agrees(
                    rw, nodes, out, [v, g],
                    lambda env, axes=axes: get_spec("weight_norm").reference(
                        env[v], np.reshape(env[g], kept), axes=axes),
                    claim=("weight-norm", axes)):
                continue
            gain = g if g.shape == kept else rw.emit("reshape", [g], {"shape": kept},
                                                     like=node, shape=kept)
            rw.replace(out, rw.emit("weight_norm", [v, gain], {"axes": axes}, like=node,
                                    shape=out.shape))
            return True
    return True


def _gain_reads_as(g: Value, kept: tuple[int, ...]) -> bool:
    """Whether a reshape of g gives the gain of each norm in order (its non-unit sizes are
    those of the kept axes, in order)."""
    return g.size == prod(kept) and [s for s in g.shape if s != 1] == [s for s in kept
                                                                        if s != 1]


class RaiseWeightNormPass:
    """See the module docstring."""

    name = "raise-weight-norm"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
