"""``Execution``: one graph run node by node on one runner, forward then backward.

Forward runs the nodes in order and hands each node's inputs and outputs to a hook as they
are produced; values nobody reads any more are dropped at once, so memory stays near one
forward pass (the pullbacks keep what the backward pass needs, as autograd would). Backward
walks the nodes in reverse: a node's output cotangents are complete when it is reached (all
its readers come later in the order), its pullback gives each input its share, and a hook
sees both. ``feed`` lets a caller replace a node's inputs (isolated mode feeds the other
side's values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from specgraph.errors import ExecutionError
from specgraph.interpreter import last_uses
from specgraph.ir import Graph, Node, Value
from specgraph.numeric.runner import FLOAT, Pullback, Runner

__all__ = ["Execution", "ForwardHook", "BackwardHook", "Feed"]

ForwardHook = Callable[[int, Node, Sequence[Any], Sequence[Any]], None]
BackwardHook = Callable[[int, Node, Sequence[Any], Sequence[Any]], None]
Feed = Callable[[int, Node, list[Any]], list[Any]]


class Execution:
    """One side's graph on its runner, with its weights and inputs (host arrays).

    Args:
        graph: the canonical graph.
        runner: the framework's runner.
        weights: parameter arrays by name (canonical layout).
        inputs: input arrays by graph input name (canonical layout).
        backward: keep pullbacks during forward so that ``backward`` can run.
    """

    def __init__(self, graph: Graph, runner: Runner, weights: Mapping[str, np.ndarray],
                 inputs: Mapping[str, np.ndarray], *, backward: bool) -> None:
        self.graph = graph
        self.runner = runner
        self.backward_enabled = backward and runner.differentiable
        self.weights = weights
        self.inputs = inputs
        self._pullbacks: dict[int, Pullback] = {}
        self._needs_grad = self._grad_values() if self.backward_enabled else set()
        self.param_grads: dict[str, Any] = {}

    def _grad_values(self) -> set[Value]:
        g = self.graph
        live = {v for v in g.params.values() if v.dtype in FLOAT}
        live |= {v for v in g.inputs if v.dtype in FLOAT}
        for node in g.nodes:
            if any(v in live for v in node.inputs):
                live.update(v for v in node.outputs if v.dtype in FLOAT)
        return live

    def _leaves(self) -> dict[Value, Any]:
        g, put = self.graph, self.runner.put
        env: dict[Value, Any] = {}
        for name, v in zip(g.input_names, g.inputs):
            env[v] = put(_shaped(self.inputs[name], v, f"input {name!r}"), v.dtype)
        for name, v in g.params.items():
            env[v] = put(_shaped(self.weights[name], v, f"parameter {name!r}"), v.dtype)
        for v, data in g.constants.items():
            env[v] = put(np.asarray(data), v.dtype)
        return env

    def forward(self, *, on_node: ForwardHook | None = None,
                feed: Feed | None = None) -> dict[str, Any]:
        """Run every node; returns the graph outputs (runner tensors) by name."""
        g = self.graph
        env = self._leaves()
        last = last_uses(g)
        keep = set(g.outputs)
        for index, node in enumerate(g.nodes):
            args = [env[v] for v in node.inputs]
            if feed is not None:
                args = feed(index, node, args)
            outs = self._run(index, node, args)
            for v, data in zip(node.outputs, outs):
                env[v] = data
            if on_node is not None:
                on_node(index, node, args, outs)
            for v in node.inputs:
                if last.get(v) == index and v not in keep:
                    env.pop(v, None)
        return {name: env[v] for name, v in zip(g.output_names, g.outputs)}

    def _run(self, index: int, node: Node, args: list[Any]) -> tuple[Any, ...]:
        try:
            if any(v in self._needs_grad for v in node.inputs):
                outs, pullback = self.runner.vjp(node, args)
                self._pullbacks[index] = pullback
            else:
                outs = self.runner.run(node, args)
        except ExecutionError:
            raise
        except Exception as err:
            if getattr(err, "__module__", "").startswith("specgraph"):
                raise
            raise ExecutionError(
                f"{self.runner.framework} failed while executing {node.describe()}: "
                f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err) else ''}"
            ) from err
        if len(outs) != len(node.outputs):
            raise ExecutionError(f"the {self.runner.framework} runner returned {len(outs)} "
                                 f"outputs for {node.describe()}, which declares "
                                 f"{len(node.outputs)}")
        return outs

    def backward(self, output_cts: Mapping[str, np.ndarray], *,
                 on_node: BackwardHook | None = None,
                 on_param: Callable[[str, Any], None] | None = None,
                 feed: Callable[[int, Node, list[Any]], list[Any]] | None = None) -> None:
        """Pull ``output_cts`` (host arrays by output name) back through every node.

        ``on_node(index, node, out_cts, in_cts)`` sees each node's output cotangents and its
        pullback's share for each input (None where nothing flows). ``on_param(name, grad)``
        sees each parameter's gradient once complete (after its first reader), which is then
        dropped; without it, parameter gradients are left in ``param_grads`` by name.
        ``feed`` may replace a node's output cotangents.
        """
        if not self.backward_enabled:
            raise ExecutionError(f"the {self.runner.framework} runner computes no gradients")
        g = self.graph
        cts: dict[Value, Any] = {}
        for name, v in zip(g.output_names, g.outputs):
            if name in output_cts and v in self._needs_grad:
                self._accumulate(cts, v, self.runner.put(output_cts[name], v.dtype))
        names = {v: n for n, v in g.params.items()}
        done_at: dict[int, list[Value]] = {}
        if on_param is not None:
            first: dict[Value, int] = {}
            for index, node in enumerate(g.nodes):
                for v in node.inputs:
                    if v in names:
                        first.setdefault(v, index)
            for v, index in first.items():
                done_at.setdefault(index, []).append(v)
        for index in range(len(g.nodes) - 1, -1, -1):
            node = g.nodes[index]
            self._step_back(index, node, cts, on_node, feed)
            for v in done_at.get(index, ()):
                if v in cts:
                    on_param(names[v], cts.pop(v))  # type: ignore[misc]
        self.param_grads = {names[v]: ct for v, ct in cts.items() if v in names}

    def _step_back(self, index: int, node: Node, cts: dict[Value, Any],
                   on_node: BackwardHook | None, feed: Any) -> None:
        pullback = self._pullbacks.pop(index, None)
        if pullback is None:
            return
        outs = [cts.pop(v, None) for v in node.outputs]
        if feed is not None:
            outs = feed(index, node, outs)
        if all(o is None for o in outs):
            return
        shares = pullback(outs)
        del pullback  # its residuals go now, not at the end of the pass
        if on_node is not None:
            on_node(index, node, outs, shares)
        for v, share in zip(node.inputs, shares):
            if share is not None and v in self._needs_grad:
                self._accumulate(cts, v, share)

    def _accumulate(self, cts: dict[Value, Any], v: Value, share: Any) -> None:
        cts[v] = share if v not in cts else self.runner.add(cts[v], share)


def _shaped(array: Any, value: Value, what: str) -> np.ndarray:
    data = np.asarray(array)
    if tuple(data.shape) != value.shape:
        raise ExecutionError(f"{what} has shape {tuple(data.shape)}, the graph expects "
                             f"{value.shape}")
    return data
