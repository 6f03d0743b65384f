"""specgraph: do two implementations of a model compute the same thing, and if not, where not?

The core imports no deep-learning framework; frontends load theirs only when they trace.
"""

from __future__ import annotations

from specgraph.errors import (
    ExecutionError,
    FactoryError,
    FrontendMissingError,
    GraphError,
    ModelReferenceError,
    SpecgraphError,
    TraceError,
)
from specgraph.check import compare
from specgraph.interpreter import Interpreter, run
from specgraph.ir import Graph, GraphBuilder, Node, Value
from specgraph.loading import trace
from specgraph.model import TracedModel
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.runner import Context

__version__ = "0.1.0"

__all__ = [
    "Context",
    "ExecutionError",
    "FactoryError",
    "FrontendMissingError",
    "Graph",
    "GraphBuilder",
    "GraphError",
    "Interpreter",
    "ModelReferenceError",
    "NumericOptions",
    "Node",
    "SpecgraphError",
    "TraceError",
    "TracedModel",
    "compare",
    "Value",
    "run",
    "trace",
    "__version__",
]
