"""The TensorFlow model's own program: its concrete function's graph, run again and observed.

``TFProgram.observe`` imports the concrete function's GraphDef (its nodes and function
library, unchanged) into a new ``tf.function``: the user inputs come in as arguments, each
captured variable reads a copy of that variable holding the given weights (the model's own
variables are never written), and every observed tensor becomes an extra output. Gradients
are TensorFlow's symbolic ones, built in the same function: ``tf.gradients`` of the outputs
(weighted by the cotangents) with respect to the observed tensors and the copies of the
trainable variables, which is what ``tf.GradientTape`` over a ``tf.function`` call
differentiates too. Eager mode runs
that function as TensorFlow runs a ``tf.function`` (the graph executor, after grappler);
compiled mode compiles it whole with XLA (``jit_compile=True``), forward and backward.

Only tensors of the concrete function's own graph can be observed: a value inside the body
of a called function (``PartitionedCall``, ``If``) is named by a tuple key and skipped. A
call of another ``tf.function`` keeps the gradient TensorFlow gave it when the model was
traced (its forward and backward pair: Keras' grouped convolutions, compiled by XLA, have no
other); a ``tf.custom_gradient`` (``tf.nn.silu``) is a Python closure over the traced
graph's tensors, so its op is differentiated through its forward ops instead (``notes``).
Grappler rewrites nothing that is fetched, so observing values can keep its arithmetic
optimizer from rewriting across them: with observed keys, the outputs may differ in the
last bits from a plain call's; without, they are the call's exactly.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Hashable, Iterator, Mapping
from typing import Any

import numpy as np

from specgraph.frontends.tf.convert import flatten_named
from specgraph.frontends.tf.quiet import quiet_native, quiet_tf
from specgraph.frontends.tf.runner import device_name
from specgraph.numeric.program import NativeProgram, Observation
from specgraph.numeric.runner import Context, RunnerError

with quiet_native():
    import tensorflow as tf

__all__ = ["TFProgram", "tf_variable"]

_SCOPE = "native"  # the name scope the program's nodes are imported under


def tf_variable(variable: Any) -> Any:
    """The ``tf.Variable`` behind a Keras 3 variable (``.value``), or ``variable`` itself."""
    inner = getattr(variable, "value", None)
    return inner if isinstance(inner, tf.Variable) else variable


def _importable(graph_def: Any, dropped: set[str]) -> tuple[Any, list[str]]:
    """``graph_def`` as another graph can import it, and the ops whose custom gradient it
    loses: without the nodes ``dropped`` (the placeholders fed through ``input_map``: XLA
    compiles no placeholder) nor colocation constraints naming them, and without the
    gradient overrides of ``tf.custom_gradient`` (TensorFlow keeps each as a Python closure
    over the traced graph's own tensors, which no other graph can call)."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    kept = [n for n in out.node if n.name not in dropped]
    del out.node[:]
    out.node.extend(kept)
    custom = []
    for node in out.node:
        override = node.attr.get("_gradient_op_type")
        if override is not None and override.s.startswith(b"CustomGradient"):
            custom.append(node.name)
            del node.attr["_gradient_op_type"]
        if "_class" not in node.attr:
            continue
        locs = [s for s in node.attr["_class"].list.s
                if s.decode().removeprefix("loc:@") not in dropped]
        if locs:
            del node.attr["_class"].list.s[:]
            node.attr["_class"].list.s.extend(locs)
        else:
            del node.attr["_class"]
    return out, custom


class TFProgram(NativeProgram):
    """A concrete function with the names the traced graph gives its parameters, inputs and
    outputs.

    Args:
        concrete: the traced ``tf.function``'s concrete function.
        input_names: graph input names, in the order of the function's own inputs.
        output_names: graph output names (the function's outputs named by their nest path).
        variables: id of each captured variable handle -> (graph parameter name, variable).
        trains: whether training updates a variable (the model's trainable variables,
            ``tracer._trains``); by default each variable's own flag.
    """

    framework = "tf"

    def __init__(self, concrete: Any, input_names: list[str], output_names: list[str],
                 variables: Mapping[int, tuple[str, Any]],
                 trains: Any = None) -> None:
        graph = concrete.graph
        captures = {internal.name: external for external, internal in graph.captures}
        user = [t for t in graph.inputs if t.name not in captures]
        self.inputs = [(name, t.name, t.dtype) for name, t in zip(input_names, user)]
        wanted = set(output_names)
        self.outputs = [(name, t.name, t.shape, t.dtype) for name, t in
                        flatten_named(concrete.structured_outputs, "")
                        if isinstance(t, tf.Tensor) and name in wanted]
        self.captures = captures
        # how TensorFlow differentiates each call of another tf.function (its forward and
        # backward pair); an imported call op would get the C++ SymbolicGradient instead
        self.call_gradients = {op.name: op._gradient_function  # noqa: SLF001
                               for op in graph.get_operations()
                               if getattr(op, "_gradient_function", None) is not None}
        read = [variables[id(e)] for e in captures.values() if id(e) in variables]
        self.params = {name: tf_variable(v) for name, v in read}  # the variables it reads
        # those training updates (a BatchNorm's moving statistics are not: no gradient, as
        # PyTorch gives its running statistics, buffers, none)
        if trains is None:
            def trains(v: Any) -> bool:
                return bool(getattr(v, "trainable", True))
        self.trainable = {name for name, v in read if trains(v)}
        # state: created non-trainable (a BatchNorm's moving statistics), not a weight a
        # frozen layer holds (trainable itself, left out of the model's trainable list)
        self.state = frozenset(name for name, v in read if not getattr(v, "trainable", True))
        self.param_of = {id(e): variables[id(e)][0] for e in captures.values()
                         if id(e) in variables}
        # floating tensors, and integer and boolean ones (no gradient reaches them, but an
        # opaque op's indices, TopKV2's, are the program's alone to give)
        self.observable = {t.name for op in graph.get_operations() for t in op.outputs
                           if t.dtype.is_floating or t.dtype.is_integer or t.dtype.is_bool}
        self.single = _single_readers(graph)
        self.graph_def, custom = _importable(
            graph.as_graph_def(), {name.split(":")[0] for name in [*captures, *(
                t.name for t in user)]})
        self.notes = tuple(
            [f"its gradients through {len(custom)} tf.custom_gradient op(s) (such as "
             f"{custom[0]}) are TensorFlow's gradients of their forward ops: a custom "
             "gradient is a Python closure over the traced graph, which the rerun program "
             "cannot call"] if custom else [])
        self._copies: dict[str, dict[str, Any]] = {}
        self._built: dict[tuple[Any, ...], tuple[Any, list[str]]] = {}

    # --- the program, built once per observed keys, mode and device ---------------------
    def _variables(self, device: str) -> dict[str, Any]:
        """Copies of the parameters' variables on ``device``, which the program reads."""
        if device not in self._copies:
            with tf.device(device):
                self._copies[device] = {
                    name: tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                      name=f"specgraph_{name}")
                    for name, v in self.params.items()}
        return self._copies[device]

    def _build(self, keys: Collection[Hashable], mode: str, backward: bool, device: str
               ) -> tuple[Any, list[str]]:
        """The program as a ``tf.function`` of (weights, inputs, cotangents), and the keys
        it observes (the tensors of the function's own graph among ``keys``; gradients at
        the floating ones)."""
        observed = sorted({k for k in keys if isinstance(k, str) and k in self.observable})
        cache_key = (tuple(observed), mode, backward, device)
        if cache_key in self._built:
            return self._built[cache_key]
        copies = self._variables(device)
        graph_def = self.graph_def
        fetch = [name for _, name, _, _ in self.outputs]

        def program(values: list[Any], inputs: list[Any], cotangents: list[Any]
                    ) -> tuple[Any, Any, Any, Any]:
            func_graph = tf.compat.v1.get_default_graph()
            # the weights first: every read of a copy is ordered after its write
            for copy, value in zip(copies.values(), values):
                copy.assign(value)
            feeds = {name: x for (_, name, _), x in zip(self.inputs, inputs)}
            handles: dict[str, Any] = {}
            for placeholder, external in self.captures.items():
                param = self.param_of.get(id(external))
                if param is not None:
                    feeds[placeholder] = func_graph.capture(copies[param].handle)
                    if copies[param].dtype.is_floating and param in self.trainable:
                        handles[param] = feeds[placeholder]
                else:
                    feeds[placeholder] = func_graph.capture(external)
            found = tf.graph_util.import_graph_def(graph_def, input_map=feeds,
                                                   return_elements=fetch + observed,
                                                   name=_SCOPE)
            outs, seen = found[:len(fetch)], found[len(fetch):]
            if not backward:
                return outs, seen, [], []
            for name, gradient in self.call_gradients.items():
                op = func_graph.get_operation_by_name(f"{_SCOPE}/{name}")
                op._gradient_function = gradient  # noqa: SLF001
            pairs = [(o, ct) for o, ct in zip(outs, cotangents) if o.dtype.is_floating]
            wrt = {**handles, **{f"input:{name}": x for (name, _, _), x in
                                 zip(self.inputs, inputs) if x.dtype.is_floating}}
            floating = [t for t in seen if t.dtype.is_floating]
            grads = tf.gradients([o for o, _ in pairs], [*floating, *wrt.values()],
                                 grad_ys=[ct for _, ct in pairs])
            dense = iter([None if g is None else tf.convert_to_tensor(g) for g in grads])
            at_seen = [next(dense) if t.dtype.is_floating else None for t in seen]
            return outs, seen, at_seen, dict(zip(wrt, dense))

        run = tf.function(program, autograph=False, jit_compile=mode == "compiled")
        self._built[cache_key] = (run, observed)
        return run, observed

    # --- running it ------------------------------------------------------------------------
    def observe(self, weights: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
                keys: Collection[Hashable], cotangents: Mapping[str, np.ndarray] | None,
                context: Context) -> Observation:
        self.require_float32(context)
        device = device_name(context.device)
        backward = cotangents is not None
        run, observed = self._build(keys, context.mode, backward, device)
        with quiet_tf(), _float32(), tf.device(device):
            values = [tf.constant(np.asarray(weights[name]), v.dtype) if name in weights
                      else v.read_value() for name, v in self.params.items()]
            args = [tf.constant(np.asarray(inputs[name]), dtype) for name, _, dtype in self.inputs]
            cts = [tf.constant(np.asarray(cotangents[name]), dtype) if name in cotangents and
                   dtype.is_floating else tf.zeros(shape, dtype if dtype.is_floating else
                                                    tf.float32)
                   for name, _, shape, dtype in self.outputs] if backward else []
            try:
                outs, seen, grads, leaf_grads = run(values, args, cts)
            except tf.errors.OpError as err:
                reason = _reason(err)
                raise RunnerError(f"TensorFlow failed to run the model's program in "
                                  f"{context.mode} mode ({reason}); compare without --native "
                                  "or in another --lhs-context/--rhs-context") from err
        obs = Observation(outputs={name: _numpy(o) for (name, *_), o in zip(self.outputs, outs)},
                          values={k: _numpy(v) for k, v in zip(observed, seen)})
        if backward:
            obs.grads = {k: _numpy(g) for k, g in zip(observed, grads) if g is not None}
            obs.param_grads = {name: _numpy(g) for name, g in leaf_grads.items()
                               if g is not None and name in weights}
            obs.input_grads = {name.removeprefix("input:"): _numpy(g)
                               for name, g in leaf_grads.items()
                               if g is not None and name.startswith("input:")}
            obs.single_reader = {k for k in obs.grads if k in self.single}
        return obs


def _single_readers(graph: Any) -> set[str]:
    """The tensors of ``graph`` that one op alone reads, once (a graph output, read by
    the caller too, is none)."""
    outputs = {t.name for t in graph.outputs}
    reads: dict[str, int] = {}
    for op in graph.get_operations():
        returns = op.type == "Identity" and op.outputs[0].name in outputs
        for t in op.inputs:
            reads[t.name] = reads.get(t.name, 0) + (2 if returns else 1)
    return {name for name, n in reads.items() if n == 1 and name not in outputs}


_NOISE = re.compile(r"^(Graph execution error:|Detected at node|File |\[\[|Stack trace)")


def _reason(err: Any) -> str:
    """The line of a TensorFlow error that says what failed (not where)."""
    lines = [line.strip() for line in (err.message or "").splitlines()]
    return next((line for line in lines if line and not _NOISE.match(line)),
                type(err).__name__)


def _numpy(t: Any) -> np.ndarray:
    """A tensor as NumPy (half precisions widened to float32, as the frontend stores them)."""
    return (tf.cast(t, tf.float32) if t.dtype in (tf.bfloat16, tf.float16) else t).numpy()


@contextlib.contextmanager
def _float32() -> Iterator[None]:
    """TensorFloat-32 off while the program runs (float32 is float32 on every GPU)."""
    was = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        yield
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(was)
