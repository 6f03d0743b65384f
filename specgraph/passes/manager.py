"""The pass manager: ``run_passes`` runs passes to a fixed point, verifying the graph after
every pass that changed it; ``canonicalize`` runs the default passes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specgraph.errors import GraphError
from specgraph.ir import Graph
from specgraph.passes.batch_reshapes import SinkBatchReshapesPass
from specgraph.passes.constants import FoldConstantsPass
from specgraph.passes.duplicates import MergeDuplicatesPass
from specgraph.passes.einsum import LowerEinsumPass
from specgraph.passes.grouped_heads import FoldRepeatedHeadsPass
from specgraph.passes.identities import DropIdentitiesPass
from specgraph.passes.padding import FoldPaddingPass
from specgraph.passes.pools import NormalizePoolsPass
from specgraph.passes.raise_activations import RaiseActivationsPass
from specgraph.passes.raise_attention import RaiseAttentionPass
from specgraph.passes.raise_linear import RaiseLinearPass
from specgraph.passes.lookups import RaiseLookupsPass
from specgraph.passes.raise_norms import RaiseNormsPass
from specgraph.passes.raise_weight_norm import RaiseWeightNormPass
from specgraph.passes.reciprocals import DivisionsAsProductsPass
from specgraph.passes.raise_rotary import RaiseRotaryPass
from specgraph.passes.rewrite import PassResult
from specgraph.passes.scalars import SinkScalarsPass
from specgraph.passes.sums import SortSumsPass
from specgraph.passes.transposes import SinkTransposesPass
from specgraph.passes.unpacking import NormalizeUnpackingPass

__all__ = ["DEFAULT_PASSES", "Pass", "canonicalize", "run_passes"]

Pass = Callable[[Graph], PassResult]

DEFAULT_PASSES: tuple[Pass, ...] = (
    FoldConstantsPass(),
    DivisionsAsProductsPass(),
    RaiseLookupsPass(),
    LowerEinsumPass(),
    SinkScalarsPass(),
    DropIdentitiesPass(),
    MergeDuplicatesPass(),
    NormalizeUnpackingPass(),
    NormalizePoolsPass(),
    SinkTransposesPass(),
    FoldPaddingPass(),
    DropIdentitiesPass(),
    RaiseActivationsPass(),
    RaiseNormsPass(),
    RaiseWeightNormPass(),
    RaiseRotaryPass(),
    RaiseLinearPass(),
    SinkBatchReshapesPass(),
    RaiseAttentionPass(),
    FoldRepeatedHeadsPass(),
    SortSumsPass(),
)


def run_passes(graph: Graph, passes: Sequence[Pass], *, max_rounds: int = 8) -> Graph:
    """Run ``passes`` in order, again and again until none changes the graph."""
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
    return graph


def canonicalize(graph: Graph) -> Graph:
    """The canonical form of ``graph``: no identities, layers raised, layouts absorbed."""
    return run_passes(graph, DEFAULT_PASSES)
