"""The fp64 reference interpreter: runs any Graph with the ops' NumPy references.

It is an implementation of the model that shares no code with any framework, so it is the
oracle for numeric checks and the executor for paper specs. Floating tensors are computed in
float64; integers and booleans keep their dtype.

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
from specgraph.ops.elementwise import numpy_dtype

__all__ = ["Interpreter", "run"]

NodeHook = Callable[[Node, tuple[np.ndarray, ...]], None]


def _as_reference(array: Any, value: Value, what: str) -> np.ndarray:
    data = np.asarray(array)
    if tuple(data.shape) != value.shape:
        raise ExecutionError(f"{what} has shape {tuple(data.shape)}, the graph expects "
                             f"{value.shape}; pass arrays shaped like the example inputs")
    return data.astype(numpy_dtype(value.dtype), copy=False)


class Interpreter:
    """Executes a Graph node by node; ``run_node`` is the one hook subclasses override.

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

    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
        """Run the graph on ``inputs`` (by name or in order); returns outputs by name."""
        g = self.graph
        if not isinstance(inputs, Mapping):
            inputs = list(inputs)
            if len(inputs) != len(g.inputs):
                raise ExecutionError(f"graph {g.name!r} takes {len(g.inputs)} inputs "
                                     f"({', '.join(g.input_names)}), got {len(inputs)}")
            inputs = dict(zip(g.input_names, inputs))
        env: dict[Value, np.ndarray] = {}
        for name, v in zip(g.input_names, g.inputs):
            if name not in inputs:
                raise ExecutionError(f"input {name!r} of graph {g.name!r} is not given")
            env[v] = _as_reference(inputs[name], v, f"input {name!r}")
        for name, v in g.params.items():
            env[v] = _as_reference(self.weights[name], v, f"parameter {name!r}")
        for v, data in g.constants.items():
            env[v] = _as_reference(data, v, "a constant")
        last_use = last_uses(g)
        keep = set(g.outputs)
        with np.errstate(all="ignore"):  # inf/nan are data here; numeric checks report them
            self._execute(env, last_use, keep)
        return {name: env[v] for name, v in zip(g.output_names, g.outputs)}

    def _execute(self, env: dict[Value, np.ndarray], last_use: dict[Value, int],
                 keep: set[Value]) -> None:
        g = self.graph
        for index, node in enumerate(g.nodes):
            args = [env[v] for v in node.inputs]
            outs = self.run_node(node, args)
            for v, data in zip(node.outputs, outs):
                env[v] = data
            if self.on_node is not None:
                self.on_node(node, outs)
            for v in node.inputs:  # free what no later node reads (memory near one pass)
                if last_use.get(v) == index and v not in keep and g.producer(v) is not None:
                    env.pop(v, None)

    def run_node(self, node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
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
