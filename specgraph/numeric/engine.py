"""``Execution``: one graph run node by node on one runner, forward then backward.

Forward is the interpreter loop of ``specgraph.interpreter`` with the runner in
``run_node``: each node's inputs and outputs go to a hook as they are produced, values
nobody reads any more are dropped at once, so memory stays near one forward pass (the
pullbacks keep what the backward pass needs, as autograd would). Backward walks the nodes in
reverse: a node's output cotangents are complete when it is reached (all its readers come
later in the order), its pullback gives each input its share, and a hook sees both. ``feed``
lets a caller replace a node's inputs (isolated mode feeds the other side's values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from specgraph.errors import ExecutionError, first_line
from specgraph.interpreter import Interpreter
from specgraph.ir import Graph, Node, Value, permuted
from specgraph.numeric.program import host_array
from specgraph.numeric.runner import Pullback, Runner
from specgraph.ops.dtypes import FLOAT_DTYPES, numpy_dtype

__all__ = ["Execution", "ForwardHook", "BackwardHook", "Feed"]

ForwardHook = Callable[[int, Node, Sequence[Any], Sequence[Any]], None]
BackwardHook = Callable[[int, Node, Sequence[Any], Sequence[Any]], None]
Feed = Callable[[int, Node, list[Any]], list[Any]]


class Execution(Interpreter):
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
        super().__init__(graph, weights)
        self.runner = runner
        # unread outputs of opaque ops the side's own program stood in for (never compared)
        self.unobserved: set[Value] = set()
        self.backward_enabled = backward and runner.differentiable
        self.inputs = inputs
        self._pullbacks: dict[int, Pullback] = {}
        self._needs_grad = self._grad_values() if self.backward_enabled else set()
        self._hook: ForwardHook | None = None
        self._feed: Feed | None = None
        self.param_grads: dict[str, Any] = {}

    def _grad_values(self) -> set[Value]:
        g = self.graph
        live = {v for v in g.params.values() if v.dtype in FLOAT_DTYPES}
        live |= {v for v in g.inputs if v.dtype in FLOAT_DTYPES}
        for node in g.nodes:
            if any(v in live for v in node.inputs):
                live.update(v for v in node.outputs if v.dtype in FLOAT_DTYPES)
        return live

    # --- forward: the interpreter loop with the runner's kernels --------------------------
    def forward(self, *, on_node: ForwardHook | None = None,
                feed: Feed | None = None) -> dict[str, Any]:
        """Run every node; returns the graph outputs (runner tensors) by name."""
        self._hook, self._feed = on_node, feed
        try:
            env = self.bind(self.inputs)
            self.execute(env)
        finally:  # the hooks hold their caller, which may hold this: no cycle outlives a run
            self._hook = self._feed = None
        g = self.graph
        return {name: env[v] for name, v in zip(g.output_names, g.outputs)}

    def load(self, array: Any, value: Value, what: str) -> Any:
        data = np.asarray(array)
        if tuple(data.shape) != value.shape:
            raise ExecutionError(f"{what} has shape {tuple(data.shape)}, the graph expects "
                                 f"{value.shape}")
        return self.runner.put(data, value.dtype)

    def inputs_for(self, index: int, node: Node, args: list[Any]) -> list[Any]:
        return args if self._feed is None else self._feed(index, node, args)

    def run_node(self, index: int, node: Node, args: list[Any]) -> tuple[Any, ...]:
        """Run ``node`` on the runner (through its pullback where a gradient will flow);
        a framework's failure names the node."""
        try:
            if any(v in self._needs_grad for v in node.inputs):
                outs, pullback = self.runner.vjp(node, args)
                self._pullbacks[index] = pullback
            else:
                outs = self.runner.run(node, args)
        except ExecutionError:
            raise
        except Exception as err:
            if type(err).__module__.startswith("specgraph"):
                raise
            raise ExecutionError(f"{self.runner.framework} failed while executing "
                                 f"{node.describe()}: {type(err).__name__}: "
                                 f"{first_line(err)}") from err
        if len(outs) != len(node.outputs):
            raise ExecutionError(f"the {self.runner.framework} runner returned {len(outs)} "
                                 f"outputs for {node.describe()}, which declares "
                                 f"{len(node.outputs)}")
        return outs

    def node_done(self, index: int, node: Node, args: Sequence[Any],
                  outs: Sequence[Any]) -> None:
        if self._hook is not None:
            self._hook(index, node, args, outs)

    # --- backward ------------------------------------------------------------------------
    def backward(self, output_cts: Mapping[str, np.ndarray], *,
                 on_node: BackwardHook | None = None,
                 on_param: Callable[[str, Any], None] | None = None,
                 feed: Feed | None = None) -> None:
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
        done_at = self._params_done_at(names) if on_param is not None else {}
        for index in range(len(g.nodes) - 1, -1, -1):
            self._step_back(index, g.nodes[index], cts, on_node, feed)
            for v in done_at.get(index, ()):
                if v in cts:
                    on_param(names[v], cts.pop(v))  # type: ignore[misc]
        self.param_grads = {names[v]: ct for v, ct in cts.items() if v in names}

    def _params_done_at(self, names: Mapping[Value, str]) -> dict[int, list[Value]]:
        """Node index -> the parameters whose gradient is complete once it has run back
        (their first reader)."""
        first: dict[Value, int] = {}
        for index, node in enumerate(self.graph.nodes):
            for v in node.inputs:
                if v in names:
                    first.setdefault(v, index)
        done_at: dict[int, list[Value]] = {}
        for v, index in first.items():
            done_at.setdefault(index, []).append(v)
        return done_at

    def _step_back(self, index: int, node: Node, cts: dict[Value, Any],
                   on_node: BackwardHook | None, feed: Feed | None) -> None:
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


def _own_gradients(graph: Graph, natives: Mapping[Value, Any],
                   values: set[Value]) -> set[Value]:
    """The ``values`` whose native value's gradient is their own whole gradient.

    The program's gradient at a native value sums the shares of all its readers. Several
    graph values can stand for one native value (a transpose canonicalization added: ``x``
    and ``transpose(x)`` for a channels-last program's ``x``). The gradient at the native is
    the gradient of ``v`` only where every reader of the others reads ``v`` through them:
    it reads a value made from ``v``, or it is a step of the chain that makes ``v``. A
    residual ``x + conv(transpose(x))`` fails that for ``transpose(x)``: the program's
    gradient there holds the residual's share too, which the other side gives ``x`` instead.
    """
    groups: dict[Any, list[Value]] = {}
    for v, native in natives.items():
        groups.setdefault(native.key, []).append(v)
    own = set(values)
    for group in groups.values():
        if len(group) > 1:
            own -= {v for v in group if v in own and not _reads_through(graph, v, set(group))}
    return own


def _reads_through(graph: Graph, v: Value, group: set[Value]) -> bool:
    """Whether every reader of ``group`` (values standing for one native value) reads it
    through ``v``: reads ``v`` or a member made from it, or makes ``v`` or a member it is
    made from."""
    made_of = set()  # the members v is made from, and v
    u: Value | None = v
    while u is not None and u in group and u not in made_of:
        made_of.add(u)
        producer = graph.producer(u)
        u = producer.inputs[0] if producer is not None and producer.inputs else None
    from_v, frontier = {v}, [v]  # v and the members made from it
    while frontier:
        for node in graph.consumers(frontier.pop()):
            for out in node.outputs:
                if out in group and out not in from_v:
                    from_v.add(out)
                    frontier.append(out)
    for u in group - from_v:
        for node in graph.consumers(u):
            if not any(out in made_of for out in node.outputs):
                return False
    return True


class NativeExecution(Execution):
    """One side's own program run once, forward and backward, and walked like a replay.

    The model's program (``TracedModel.program``) runs with the side's weights and inputs
    and observes every native value the graph's ``natives`` name, with the gradient of the
    loss at each. The walk then hands each node the program's own value wherever the graph
    names one (the framework's kernels, its compiled program); a value the program has no
    counterpart of (a transpose canonicalization added) is computed from those with the
    runner's kernel. Backward hands each node the program's gradient at its outputs and, for
    an input only that node reads, at that input (its whole share); parameter gradients are
    the program's. Where several graph values stand for one native value, the program's
    gradient there is given only to the one it belongs to (``_own_gradients``). The graph
    outputs are the program's outputs.

    Args:
        model: the canonical TracedModel whose program runs.
        loss: the output cotangents by output name (canonical layout), for the backward.
        program_weights: ``weights`` in the program's layouts, made beforehand (else made
            here).
    """

    def __init__(self, graph: Graph, runner: Runner, weights: Mapping[str, np.ndarray],
                 inputs: Mapping[str, np.ndarray], *, backward: bool, model: Any,
                 loss: Mapping[str, np.ndarray],
                 program_weights: Mapping[str, np.ndarray] | None = None) -> None:
        super().__init__(graph, runner, weights, inputs, backward=backward)
        from specgraph.numeric import program as prog

        computed = {v for node in graph.nodes for v in node.outputs}
        natives = {v: n for v, n in graph.natives.items() if v in computed}
        run = (program_weights if program_weights is not None
               else prog.native_weights(model, weights, model.param_shapes),
               prog.native_inputs(model, inputs), {n.key for n in natives.values()},
               prog.native_cotangents(model, loss) if self.backward_enabled else None,
               runner.context)
        obs = model.program.observe(*run)
        self.observed: dict[Value, np.ndarray] = {}
        self.grads: dict[Value, np.ndarray] = {}
        self.single: set[Value] = set()  # values one op of the program alone reads
        for v, native in natives.items():
            if native.key in obs.values:
                array = native.canonical(obs.values[native.key])
                if tuple(array.shape) == v.shape:
                    self.observed[v] = array
                    if native.key in obs.grads:
                        self.grads[v] = native.canonical(obs.grads[native.key])
                    if native.key in obs.single_reader:
                        self.single.add(v)
        # --repeat: the whole program runs again; a value that differs bit for bit is the
        # program's nondeterminism (kept here, by graph value, for the walk's hook)
        self.again: dict[Value, Any] = {}
        for _ in range(max(1, runner.context.repeat) - 1):
            more = model.program.observe(*run)
            for v, native in natives.items():
                if v in self.observed and v not in self.again and native.key in more.values:
                    x = native.canonical(more.values[native.key])
                    if not np.array_equal(host_array(self.observed[v]), host_array(x),
                                          equal_nan=True):
                        self.again[v] = x
            del more
        for v in set(self.grads) - _own_gradients(graph, graph.natives, set(self.grads)):
            del self.grads[v]
        for name, v in zip(graph.input_names, graph.inputs):
            if name in obs.input_grads:
                g = obs.input_grads[name]
                perm = model.input_layouts.get(name)
                self.grads[v] = g if perm is None else permuted(g, perm)
        layouts = model.output_layouts
        self.native_outputs = {
            k: permuted(a, tuple(np.argsort(layouts[k]))) if k in layouts else a
            for k, a in obs.outputs.items()}
        self.native_param_grads = prog.canonical_param_grads(model, obs.param_grads)

    def _share(self, v: Value) -> Any:
        """The whole gradient at ``v`` where one node alone reads it (its share), else None
        (the program gives totals, not one reader's part of them)."""
        g = self.graph
        if len(g.consumers(v)) != 1 or v in g.outputs:
            return None
        name = g.param_name(v)
        if name is None and v not in self.single and v not in g.inputs:
            return None  # the program's gradient there may gather other readers' shares
        grad = self.native_param_grads.get(name) if name is not None else self.grads.get(v)
        return None if grad is None else self.walk_form(grad, v.dtype)

    def host_value(self, v: Value) -> np.ndarray | None:
        """The side's own value ``v`` on the host: observed, a parameter, an input or a
        constant (None for a value its program has no counterpart of)."""
        g = self.graph
        if v in self.observed:
            return host_array(self.observed[v])
        name = g.param_name(v)
        if name is not None:
            return np.asarray(self.weights[name])
        if v in g.constants:
            return np.asarray(g.constants[v])
        if v in g.inputs:
            return np.asarray(self.inputs[g.input_names[g.inputs.index(v)]])
        return None

    def load(self, array: Any, value: Value, what: str) -> Any:
        """A leaf as the walk holds it: the host array itself, put on the runner only when
        one of its kernels reads it (the program ran on it already)."""
        if tuple(np.shape(array)) != value.shape:
            raise ExecutionError(f"{what} has shape {tuple(np.shape(array))}, the graph "
                                 f"expects {value.shape}")
        return array

    def walk_form(self, array: Any, dtype: str) -> Any:
        """An array of the program as the walk hands it on: as it is where it is the
        runner's own floating dtype (a host array, or the program's tensor on its device:
        nothing is copied), else put on the runner."""
        if not isinstance(array, np.ndarray):
            return array
        if dtype in FLOAT_DTYPES and array.dtype == np.float32:  # programs run in float32
            return array
        return self.runner.put(array, dtype)

    def runner_form(self, array: Any, dtype: str) -> Any:
        """An array as the runner's kernels take it (host arrays put on the runner)."""
        return self.runner.put(array, dtype) if isinstance(array, np.ndarray) else array

    def run_node(self, index: int, node: Node, args: list[Any]) -> tuple[Any, ...]:
        if all(v in self.observed for v in node.outputs):
            return tuple(self.walk_form(self.observed[v], v.dtype) for v in node.outputs)
        g = self.graph
        if node.op == "opaque" and any(v in self.observed for v in node.outputs) and all(
                v in self.observed or (not g.consumers(v) and v not in g.outputs)
                for v in node.outputs):
            # an op no runner knows whose outputs anything reads are the program's (TF's
            # TopKV2 in an argsort, its values unread and of a shape TF leaves unknown):
            # the unread ones stand as zeros, never compared (``unobserved``)
            self.unobserved.update(v for v in node.outputs if v not in self.observed)
            return tuple(self.walk_form(self.observed[v], v.dtype) if v in self.observed
                         else self.runner.put(np.zeros(v.shape, numpy_dtype(v.dtype)), v.dtype)
                         for v in node.outputs)
        args = [self.runner_form(a, v.dtype) for a, v in zip(args, node.inputs)]
        saved, self._needs_grad = self._needs_grad, set()  # no pullbacks: native gradients
        try:
            return super().run_node(index, node, args)
        finally:
            self._needs_grad = saved

    def forward(self, *, on_node: ForwardHook | None = None,
                feed: Feed | None = None) -> dict[str, Any]:
        outs = super().forward(on_node=on_node, feed=feed)
        g = self.graph
        return {name: self.walk_form(self.native_outputs[name], v.dtype)
                if name in self.native_outputs else outs[name]
                for name, v in zip(g.output_names, g.outputs)}

    def backward(self, output_cts: Mapping[str, np.ndarray], *,
                 on_node: BackwardHook | None = None,
                 on_param: Callable[[str, Any], None] | None = None,
                 feed: Feed | None = None) -> None:
        if not self.backward_enabled:
            raise ExecutionError(f"the {self.runner.framework} program computes no gradients")
        g = self.graph
        put = self.walk_form
        names = {v: n for n, v in g.params.items()}
        done_at = self._params_done_at(names) if on_param is not None else {}
        for index in range(len(g.nodes) - 1, -1, -1):
            node = g.nodes[index]
            octs = [put(self.grads[v], v.dtype) if v in self.grads else None
                    for v in node.outputs]
            if on_node is not None and any(c is not None for c in octs):
                on_node(index, node, octs, [self._share(v) for v in node.inputs])
            for v in done_at.get(index, ()):
                if names[v] in self.native_param_grads:
                    on_param(names[v], put(self.native_param_grads[names[v]],  # type: ignore
                                           v.dtype))
        self.param_grads = {n: put(a, g.params[n].dtype)
                            for n, a in self.native_param_grads.items() if n in g.params}
