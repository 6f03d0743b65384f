"""The interpreter loop over a Graph, and the fp64 reference interpreter built on it.

``Interpreter`` runs a graph node by node with one hook per node, ``run_node`` (as
``torch.fx.Interpreter.run_node``): binding the leaves (``load``), feeding each node its
inputs, freeing every value after its last reader, are written once here. The fp64
reference interpreter is ``Interpreter`` itself: ``run_node`` computes each node with its
op's NumPy reference in float64, an implementation of the model that shares no code with
any framework, so it is the oracle for numeric checks and the executor for paper specs
(integers and booleans keep their dtype). ``specgraph.numeric.engine.Execution`` is the same
loop with a framework's runner in ``run_node``.

Example:
    >>> import numpy as np
    >>> from specgraph.ir import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.input("x", (3,), "float32")
    >>> b.output("y", b.add("relu", [x], shape=(3,), dtype="float32"))
    >>> run(b.build(), {"x": np.array([-1.0, 0.0, 2.0])})["y"]
    array([0., 0., 2.])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from specgraph.errors import ExecutionError
from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops.dtypes import numpy_dtype

__all__ = ["Interpreter", "run", "last_uses"]

NodeHook = Callable[[Node, tuple[Any, ...]], None]


class Interpreter:
    """Executes a Graph node by node; ``run_node`` is the hook subclasses override.

    Args:
        graph: the graph to run.
        weights: parameter arrays by parameter name, in canonical layout.
        on_node: called with each node and its outputs as they are produced (layer capture).
        check_shapes: raise if an op's output shape differs from the graph's declared shape.
    """

    def __init__(self, graph: Graph, weights: Mapping[str, Any], *,
                 on_node: NodeHook | None = None, check_shapes: bool = True) -> None:
        self.graph = graph
        missing = sorted(set(graph.params) - set(weights))
        if missing:
            raise ExecutionError(
                f"no weights for {len(missing)} parameter(s) of graph {graph.name!r}, "
                f"e.g. {missing[0]!r}; pass every parameter of the traced model"
            )
        self.weights = weights
        self.on_node = on_node
        self.check_shapes = check_shapes

    # --- the loop ------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
        """Run the graph on ``inputs`` (by name or in order); returns outputs by name."""
        env = self.bind(self.named_inputs(inputs))
        with np.errstate(all="ignore"):  # inf/nan are data here; numeric checks report them
            self.execute(env)
        g = self.graph
        return {name: env[v] for name, v in zip(g.output_names, g.outputs)}

    def named_inputs(self, inputs: Mapping[str, Any] | Sequence[Any]) -> Mapping[str, Any]:
        g = self.graph
        if isinstance(inputs, Mapping):
            return inputs
        inputs = list(inputs)
        if len(inputs) != len(g.inputs):
            raise ExecutionError(f"graph {g.name!r} takes {len(g.inputs)} inputs "
                                 f"({', '.join(g.input_names)}), got {len(inputs)}")
        return dict(zip(g.input_names, inputs))

    def bind(self, inputs: Mapping[str, Any]) -> dict[Value, Any]:
        """The environment of leaves: inputs, parameters and constants, each ``load``-ed."""
        g = self.graph
        env: dict[Value, Any] = {}
        for name, v in zip(g.input_names, g.inputs):
            if name not in inputs:
                raise ExecutionError(f"input {name!r} of graph {g.name!r} is not given")
            env[v] = self.load(inputs[name], v, f"input {name!r}")
        for name, v in g.params.items():
            env[v] = self.load(self.weights[name], v, f"parameter {name!r}")
        for v, data in g.constants.items():
            env[v] = self.load(data, v, "a constant")
        return env

    def execute(self, env: dict[Value, Any]) -> None:
        """Run every node in order over ``env``; values no later node reads are dropped at
        once (memory stays near one pass), the graph's outputs are kept."""
        g = self.graph
        last = last_uses(g)
        keep = set(g.outputs)
        for index, node in enumerate(g.nodes):
            args = self.inputs_for(index, node, [env[v] for v in node.inputs])
            outs = self.run_node(index, node, args)
            for v, data in zip(node.outputs, outs):
                env[v] = data
            self.node_done(index, node, args, outs)
            for v in node.inputs:
                if last.get(v) == index and v not in keep:
                    env.pop(v, None)

    # --- hooks ---------------------------------------------------------------------------
    def load(self, array: Any, value: Value, what: str) -> Any:
        """A leaf's array as the loop holds it (here: float64 NumPy, shape checked)."""
        data = np.asarray(array)
        if tuple(data.shape) != value.shape:
            raise ExecutionError(f"{what} has shape {tuple(data.shape)}, the graph expects "
                                 f"{value.shape}; pass arrays shaped like the example inputs")
        return data.astype(numpy_dtype(value.dtype), copy=False)

    def inputs_for(self, index: int, node: Node, args: list[Any]) -> list[Any]:
        """The inputs node ``index`` runs on (here: the values it reads)."""
        return args

    def run_node(self, index: int, node: Node, args: list[Any]) -> tuple[Any, ...]:
        """Execute one node with its op's reference; errors name the node."""
        spec = get_spec(node.op)
        try:
            result = spec.reference(*args, **node.attrs)
        except ExecutionError as err:
            raise ExecutionError(f"while executing {node.describe()}: {err}") from err
        except Exception as err:  # a reference failing on this node's data is reported as such
            raise ExecutionError(
                f"while executing {node.describe()}: {type(err).__name__}: {err}"
            ) from err
        outs = result if isinstance(result, tuple) else (result,)
        if len(outs) != len(node.outputs):
            raise ExecutionError(f"while executing {node.describe()}: the reference returned "
                                 f"{len(outs)} outputs, the node declares {len(node.outputs)}")
        checked = []
        for v, data in zip(node.outputs, outs):
            data = np.asarray(data)
            if self.check_shapes and tuple(data.shape) != v.shape:
                raise ExecutionError(
                    f"while executing {node.describe()}: the reference computed shape "
                    f"{tuple(data.shape)} where the graph declares {v.shape}; the frontend "
                    "converted this op wrongly"
                )
            checked.append(data.astype(numpy_dtype(v.dtype), copy=False))
        return tuple(checked)

    def node_done(self, index: int, node: Node, args: Sequence[Any],
                  outs: Sequence[Any]) -> None:
        """Called once node ``index`` has run (here: ``on_node(node, outs)``)."""
        if self.on_node is not None:
            self.on_node(node, tuple(outs))


def last_uses(graph: Graph) -> dict[Value, int]:
    """The index of the last node that reads each value (values read by none are absent)."""
    last: dict[Value, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
    return last


def run(graph: Graph, inputs: Mapping[str, Any] | Sequence[Any],
        weights: Mapping[str, Any] | None = None, *,
        on_node: NodeHook | None = None) -> dict[str, np.ndarray]:
    """Run ``graph`` in float64 on ``inputs`` with ``weights``; returns outputs by name."""
    return Interpreter(graph, weights or {}, on_node=on_node).run(inputs)
