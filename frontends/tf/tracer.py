"""TensorFlow/Keras frontend: a concrete function's graph, op by op, onto the shared IR.

The model (Keras 3, tf_keras or a ``tf.Module`` with ``__call__``) is traced with
``tf.function`` on TensorSpecs of its example inputs (static shapes, ``training=False``),
and the ops of that graph are converted in order by the table in
``specgraph.frontends.tf.ops``; an op none knows becomes ``opaque``. Variables become graph
parameters named by their path with ``.`` for ``/``: Keras 3 ``variable.path``
(``dense/kernel`` -> ``dense.kernel``), tf_keras ``variable.name`` without ``:0``, a
``tf.Module``'s attribute path (``layers.0.w``); a leading model name is dropped. ``scope``
is the Keras layer path recovered from op names, ``source`` the user frame of the op's
traceback. NHWC convolutions, pools and fused batch norms are wrapped in transposes to
NCHW; their kernels are stored in canonical layout (HWIO -> OIHW). The concrete function is
kept as the model's own program (``specgraph.frontends.tf.program``).
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import Any

import numpy as np

from specgraph.frontends.tf.quiet import quiet_native as _quiet_native
from specgraph.frontends.tf.quiet import quiet_tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

with _quiet_native():
    import tensorflow as tf

from specgraph.errors import FactoryError, TraceError  # noqa: E402
from specgraph.frontends._common.inputs import example_tuple  # noqa: E402
from specgraph.frontends._common.table import join  # noqa: E402
from specgraph.frontends.tf import loops, ops, shape_ops  # noqa: E402
from specgraph.frontends.tf.convert import Converter, flatten_named  # noqa: E402
from specgraph.frontends.tf.program import TFProgram, tf_variable  # noqa: E402
from specgraph.frontends.tf.scopes import Scopes  # noqa: E402
from specgraph.model import LazyOutputs, TracedModel  # noqa: E402

__all__ = ["trace", "accepts", "FRAMEWORK"]

FRAMEWORK = "tf"

_AUTO_INPUT = re.compile(r"^(keras_tensor|input_layer|input)(_\d+)?$")
_CONVERTERS = join(ops.CONVERTERS, shape_ops.CONVERTERS, loops.CONVERTERS)


def _keras_layer_types() -> tuple[type, ...]:
    types = []
    for name in ("keras", "tf_keras"):
        module = sys.modules.get(name)
        layer = getattr(getattr(module, "layers", None), "Layer", None)
        if isinstance(layer, type):
            types.append(layer)
    return tuple(types)


def _is_keras(model: Any) -> bool:
    return bool(_keras_layer_types()) and isinstance(model, _keras_layer_types())


def _keras3_backend(model: Any) -> str | None:
    module = sys.modules.get("keras")
    layer = getattr(getattr(module, "layers", None), "Layer", None)
    if isinstance(layer, type) and isinstance(model, layer):
        return str(module.backend.backend())
    return None


def accepts(model: Any) -> bool:
    return _is_keras(model) or (isinstance(model, tf.Module) and callable(model))


def trace(model: Any, example_inputs: Any, *, reference: str = "<model>") -> TracedModel:
    """Trace a Keras model, tf_keras model or ``tf.Module`` on ``example_inputs``.

    Args:
        model: the model; Keras models are called with ``training=False``.
        example_inputs: a tuple of inputs (arrays, tensors or nests of them), or one array.
        reference: the model reference, for messages.

    Raises:
        FactoryError: ``model`` is no TensorFlow model, or the inputs are not a tuple.
        TraceError: the model failed on its inputs or TensorFlow could not trace it.
    """
    if not accepts(model):
        raise FactoryError(f"{reference}: expected a Keras model, a tf_keras model or a "
                           f"tf.Module with __call__, got {type(model).__name__}")
    args = _as_arrays(example_inputs, reference)
    keras = _is_keras(model)
    backend = _keras3_backend(model)
    if backend not in (None, "tensorflow"):
        raise TraceError(f"{reference}: this Keras 3 model runs on the {backend} backend; set "
                         "KERAS_BACKEND=tensorflow to trace it with the TF frontend, or pass it "
                         "to the JAX frontend")
    with quiet_tf():
        try:
            concrete = _concrete_function(model, args, keras, reference)
        except TraceError:
            _run_eagerly(model, args, keras, reference)  # a clearer reason if it fails eagerly
            raise
        scopes = Scopes(model)
        variables = _variables(model, concrete, scopes)
        converter = Converter(concrete, reference, variables, scopes, _CONVERTERS)
        inputs = dict(_input_names(model, args, keras))
        graph, weights = converter.convert(list(inputs))
    names = list(graph.output_names)
    steps, shapes = converter.native_layouts()
    program = TFProgram(concrete, list(inputs), names, variables, _trains(model))

    def own_outputs() -> dict[str, np.ndarray]:  # TensorFlow running the traced graph
        with quiet_tf():
            result = concrete(*tf.nest.flatten(tf.nest.map_structure(tf.convert_to_tensor,
                                                                     args)))
        return {name: _to_numpy(t) for name, t in flatten_named(result, "") if name in names}

    return TracedModel(graph, weights, inputs, LazyOutputs(own_outputs, names), FRAMEWORK,
                       reference, native=model, program=program, param_layouts=steps,
                       param_shapes=shapes, layer_attrs=_training_attrs(scopes))


def _training_attrs(scopes: Scopes) -> dict[str, dict[str, float]]:
    """The momentum of every Keras batch normalization, in PyTorch's convention: an
    inference program never reads it (Keras 3 writes the layer out as arithmetic)."""
    found = {}
    for path, layer in scopes.layers():
        momentum = getattr(layer, "momentum", None)
        if type(layer).__name__ == "BatchNormalization" and isinstance(momentum, (int, float)):
            found[path] = {"momentum": round(1.0 - float(momentum), 12)}
    return found


# --- inputs, the eager run and the concrete function ------------------------------------
def _as_arrays(example_inputs: Any, reference: str) -> tuple[Any, ...]:
    example_inputs = example_tuple(
        example_inputs, reference, single=lambda x: isinstance(x, (np.ndarray, tf.Tensor)),
        returns="(model, example_inputs)")
    return tuple(tf.nest.map_structure(_to_numpy, a) for a in example_inputs)


def _to_numpy(leaf: Any) -> Any:
    if hasattr(leaf, "numpy"):
        leaf = leaf.numpy()
    array = np.asarray(leaf)
    if array.dtype.name == "bfloat16":
        array = array.astype(np.float32)
    return array


def _call(model: Any, args: tuple[Any, ...], keras: bool) -> Any:
    return model(*args, training=False) if keras else model(*args)


def _run_eagerly(model: Any, args: tuple[Any, ...], keras: bool, reference: str) -> Any:
    try:
        return _call(model, tuple(tf.nest.map_structure(tf.convert_to_tensor, args)), keras)
    except Exception as err:
        if keras and len(args) > 1 and isinstance(err, TypeError) and \
                "multiple values for argument" in str(err):
            # Keras's call(inputs, training): a second input landed on ``training``
            raise TraceError(
                f"{reference}: the Keras model takes its {len(args)} inputs as one "
                "argument, a list, and they were given as separate example inputs; return "
                "(model, ([x1, x2],)) from the factory: one example input, the list") from err
        raise TraceError(f"{reference}: the model failed on its example inputs with "
                         f"{_reason(err)}; check the inputs' shapes and dtypes against the "
                         "model") from err


def _concrete_function(model: Any, args: tuple[Any, ...], keras: bool, reference: str) -> Any:
    """The model's graph on TensorSpecs of its inputs. Python that branches on a tensor
    (HF's TF Swin compares ``tf.reduce_min`` of its window sizes in an ``if``) is traced
    again with AutoGraph, which writes such branches as ``tf.cond``; the converter keeps
    the branch a constant predicate picks (see ``Converter.inline_branch``)."""
    specs = tf.nest.map_structure(lambda a: tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)), args)
    call = getattr(model, "__call__", None)
    try:
        if not keras and hasattr(call, "get_concrete_function"):
            concrete = call.get_concrete_function(*specs)  # already a tf.function: no nesting
            if _fully_defined(concrete) or not hasattr(call, "python_function"):
                return concrete
            # its input_signature leaves axes unknown: its Python traced on these shapes
            return tf.function(call.python_function, autograph=False).get_concrete_function(
                *specs)
        try:
            function = tf.function(lambda *a: _call(model, a, keras), autograph=False)
            return function.get_concrete_function(*specs)
        except tf.errors.OperatorNotAllowedInGraphError as err:
            try:
                function = tf.function(lambda *a: _call(model, a, keras), autograph=True)
                return function.get_concrete_function(*specs)
            except Exception:  # noqa: BLE001  (the first error says what went wrong)
                raise err from None
    except Exception as err:
        raise TraceError(
            f"{reference}: TensorFlow could not trace the model into a graph: {_reason(err)}; "
            "keep Python control flow off tensor values (use tf.cond or keras.ops.cond), or "
            "run with --debug for TensorFlow's full report"
        ) from err


def _fully_defined(concrete: Any) -> bool:
    """Whether every input of a concrete function has a static shape."""
    return all(t.shape.is_fully_defined() for t in concrete.inputs
               if t.dtype != tf.resource)


_NOISE = re.compile(r"^(Exception encountered when calling|Arguments received by|in user code|"
                    r"File \"|\u2022|Call arguments received)")


def _reason(err: BaseException) -> str:
    """The first sentence of what a (possibly Keras-wrapped) TensorFlow error says failed."""
    text = re.sub(r"\x1b\[[0-9;]*m|\{\{function_node [^}]*\}\}\s*| name: *$", "", str(err))
    lines = [line.strip() for line in text.strip().splitlines()
             if line.strip() and not _NOISE.match(line.strip())]
    named = [m.group(1) for line in lines
             if (m := re.match(r"^((?:\w+\.)*\w*(?:Error|Exception): .+)$", line))]
    reason = named[-1] if named else (lines[0] if lines else "")
    reason = re.split(r"(?<=[a-z0-9`'\)])\. ", " ".join(reason.split()))[0].rstrip(".:")
    if not re.match(r"^\w*(Error|Exception): ", reason):
        reason = f"{type(err).__name__}: {reason}" if reason else type(err).__name__
    return reason


def _call_parameters(model: Any, keras: bool) -> list[str]:
    fn = model.call if keras else getattr(model.__call__, "python_function", model.__call__)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    skip = {"self", "training", "mask"}
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.name not in skip]


def _input_names(model: Any, args: tuple[Any, ...], keras: bool) -> list[tuple[str, Any]]:
    """Graph input names: the call signature's parameter names and nest paths, or the
    names a functional Keras model gave its inputs when the user chose them."""
    params = _call_parameters(model, keras)
    named: list[tuple[str, Any]] = []
    for i, arg in enumerate(args):
        root = params[i] if i < len(params) else f"input{i}"
        named.extend(flatten_named(arg, root))
    symbolic = getattr(model, "inputs", None) if keras else None
    try:
        chosen = [str(t.name).split(":")[0] for t in tf.nest.flatten(symbolic or [])]
    except (AttributeError, TypeError):
        chosen = []
    if (len(chosen) == len(named) and len(set(chosen)) == len(chosen)
            and not any(_AUTO_INPUT.match(c) for c in chosen) and len(args) == 1
            and not isinstance(args[0], dict)):
        named = [(c, a) for c, (_, a) in zip(chosen, named)]
    return named


# --- variables ----------------------------------------------------------------------------
def _trains(model: Any) -> Any:
    """Whether training updates a variable: it is among the model's trainable variables,
    which a Keras layer's own ``trainable = False`` takes its weights out of (TF's Whisper
    freezes its encoder's position table so, its variable itself created trainable); a
    variable the model does not track keeps its own flag."""
    try:
        tracked = {id(v) for v in model.variables}
        trainable = {id(v) for v in model.trainable_variables}
    except Exception:  # noqa: BLE001  (a model without those lists: the variables decide)
        tracked, trainable = set(), set()

    def trains(v: Any) -> bool:
        if id(v) in tracked:
            return id(v) in trainable
        return bool(getattr(v, "trainable", True))

    return trains



def _variables(model: Any, concrete: Any, scopes: Scopes) -> dict[int, tuple[str, Any]]:
    """id of each captured variable handle -> (parameter name, variable)."""
    found: list[tuple[str, Any]] = []
    if hasattr(model, "_flatten_layers") or not isinstance(model, tf.Module):
        for v in model.variables:
            path = getattr(v, "path", None) or v.name.split(":")[0]
            found.append((path.replace("/", "."), v))
    else:
        for path, v in model._flatten(predicate=lambda x: isinstance(x, tf.Variable),
                                      with_path=True):
            found.append((".".join(str(p) for p in path), v))
    names: dict[int, tuple[str, Any]] = {}
    used: set[str] = set()
    for name, v in found:
        handle = _handle(v)
        if handle is None or id(handle) in names:
            continue
        name = _unique(scopes.strip_root(name), used)
        names[id(handle)] = (name, v)
    for v in concrete.graph.variables:  # read by the model but not tracked by it
        handle = _handle(v)
        if handle is not None and id(handle) not in names:
            names[id(handle)] = (_unique(v.name.split(":")[0].replace("/", "."), used), v)
    return names


def _handle(variable: Any) -> Any:
    try:
        return tf_variable(variable).handle
    except (AttributeError, ValueError):
        return None


def _unique(name: str, used: set[str]) -> str:
    candidate, i = name, 1
    while candidate in used:
        candidate, i = f"{name}_{i}", i + 1
    used.add(candidate)
    return candidate
