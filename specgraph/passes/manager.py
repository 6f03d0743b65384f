"""The pass manager: ``run_passes`` runs passes to a fixed point, verifying the graph after
every pass that changed it; ``canonicalize`` runs the default passes to their fixed point,
then the finishing passes (sums in one order), and again until neither changes the graph:
a finishing pass reorders what the others must first have raised (a batch norm's
``x * scale + shift`` added into a residual sum is one term once raised, three if sorted
first)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specgraph.errors import GraphError
from specgraph.ir import Graph, Value
from specgraph.passes.batch_reshapes import SinkBatchReshapesPass
from specgraph.passes.constants import FoldConstantsPass
from specgraph.passes.duplicates import MergeDuplicatesPass
from specgraph.passes.einsum import LowerEinsumPass
from specgraph.passes.grouped_heads import FoldRepeatedHeadsPass
from specgraph.passes.identities import DropIdentitiesPass
from specgraph.passes.layouts import UnifyLayoutsPass
from specgraph.passes.linear_sums import BiasesOutOfSumsPass
from specgraph.passes.packed import SeparatePackedProjectionsPass
from specgraph.passes.padding import FoldPaddingPass
from specgraph.passes.pools import NormalizePoolsPass
from specgraph.passes.raise_activations import RaiseActivationsPass
from specgraph.passes.raise_attention import RaiseAttentionPass
from specgraph.passes.raise_linear import RaiseLinearPass
from specgraph.passes.lookups import RaiseLookupsPass
from specgraph.passes.raise_norms import RaiseNormsPass
from specgraph.passes.raise_weight_norm import RaiseWeightNormPass
from specgraph.passes.reciprocals import DivisionsAsProductsPass
from specgraph.passes.resize_matrices import RaiseResizeMatricesPass
from specgraph.passes.repeats import RepeatsAsGathersPass
from specgraph.passes.raise_rotary import RaiseRotaryPass
from specgraph.passes.rewrite import PassResult
from specgraph.passes.scalars import SinkScalarsPass
from specgraph.passes.sums import SortSumsPass
from specgraph.passes.transposes import SinkTransposesPass
from specgraph.passes.unpacking import NormalizeUnpackingPass

__all__ = ["DEFAULT_PASSES", "FINISHING_PASSES", "Pass", "canonicalize", "run_passes"]

Pass = Callable[[Graph], PassResult]

DEFAULT_PASSES: tuple[Pass, ...] = (
    FoldConstantsPass(),
    DivisionsAsProductsPass(),
    RaiseLookupsPass(),
    RaiseResizeMatricesPass(),
    LowerEinsumPass(),
    SinkScalarsPass(),
    DropIdentitiesPass(),
    MergeDuplicatesPass(),
    NormalizeUnpackingPass(),
    NormalizePoolsPass(),
    SinkTransposesPass(),
    UnifyLayoutsPass(),
    FoldPaddingPass(),
    DropIdentitiesPass(),
    RaiseActivationsPass(),
    RaiseNormsPass(),
    RaiseWeightNormPass(),
    RaiseRotaryPass(),
    RaiseLinearPass(),
    BiasesOutOfSumsPass(),
    SinkBatchReshapesPass(),
    SeparatePackedProjectionsPass(),
    RaiseAttentionPass(),
    FoldRepeatedHeadsPass(),
)

FINISHING_PASSES: tuple[Pass, ...] = (SortSumsPass(), RepeatsAsGathersPass())


def run_passes(graph: Graph, passes: Sequence[Pass], *, max_rounds: int = 32) -> Graph:
    """Run ``passes`` in order, again and again until none changes the graph (each pass
    sweeps the graph once, so a transpose sunk through a deep network takes a few rounds)."""
    seen: set[int] = set()
    for _ in range(max_rounds):
        changed = False
        for p in passes:
            result = p(graph)
            if result.modified:
                try:
                    result.graph.verify()
                except GraphError as err:
                    raise GraphError(f"pass {getattr(p, 'name', p)} broke the graph: {err}"
                                     ) from err
                graph = result.graph
                changed = True
        if not changed:
            return graph
        state = _fingerprint(graph)
        if state in seen:  # passes undoing each other: a round that ends where one ended
            return graph
        seen.add(state)
    return graph


def _fingerprint(graph: Graph) -> int:
    """The graph's structure (ops, attributes, wiring by position, leaves by shape), as a
    hash: two rounds that end in the same structure end the run."""
    where: dict[Value, tuple] = {v: ("in", i) for i, v in enumerate(graph.inputs)}
    where.update((v, ("param", k)) for k, v in graph.params.items())
    where.update((v, ("const", v.shape, v.dtype)) for v in graph.constants)
    parts = []
    for i, node in enumerate(graph.nodes):
        for k, v in enumerate(node.outputs):
            where[v] = ("node", i, k)
        parts.append((node.op, repr(sorted(node.attrs.items())),
                      tuple(where.get(v, ("?", v.shape)) for v in node.inputs)))
    return hash((tuple(parts), tuple(where.get(v) for v in graph.outputs)))


def canonicalize(graph: Graph) -> Graph:
    """The canonical form of ``graph``: no identities, layers raised, layouts absorbed."""
    for _ in range(8):
        graph = run_passes(graph, DEFAULT_PASSES)
        finished = run_passes(graph, FINISHING_PASSES, max_rounds=1)
        if finished is graph:
            return graph
        graph = finished
    return graph
