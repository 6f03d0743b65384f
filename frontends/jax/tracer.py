"""JAX and Flax frontend: the closed jaxpr of ``apply(params, *inputs)``, onto the shared IR.

``jax.make_jaxpr`` traces the apply function with the parameters as explicit arguments, so
every leaf of the params pytree (Flax: of ``variables`` or of the NNX state) becomes a graph
parameter named by its key path joined with "." (``hidden.kernel``,
``params.Dense_0.kernel``, ``batch_stats.BatchNorm_0.mean``, ``layers.0.kernel``). Nested
calls (jit, custom_jvp/vjp, remat) are inlined, except library functions that are canonical
ops (``jax.nn.relu``, ``gelu``, ``softmax``, ``jnp.take``, ...), which become that op; each
primitive has a small converter in ``ops``, ``shape_ops`` and ``layers``, and one none knows
becomes ``opaque``. ``scope`` comes from the equations' name stack (``jax.named_scope``;
Flax module paths, see ``flax``), ``source`` from the innermost user frame of their
traceback.

The framework's own outputs (``TracedModel.outputs``) are computed when they are first
read, by JAX running the traced program once under ``jax.jit``: tracing costs one
``make_jaxpr``, and one compilation is faster than compiling every primitive eagerly. The
closed jaxpr itself is the TracedModel's ``program`` (``program.JaxProgram``), run again
and observed at the keys the graph's natives name.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import jaxpr_as_fun

from specgraph.errors import FactoryError, TraceError, first_line
from specgraph.frontends._common.inputs import example_tuple
from specgraph.frontends._common.table import join
from specgraph.frontends.jax import layers, ops, shape_ops
from specgraph.frontends.jax.program import JaxProgram
from specgraph.frontends.jax.walk import JaxprConverter, to_numpy
from specgraph.model import LazyOutputs, TracedModel

__all__ = ["trace", "trace_linen", "trace_nnx", "accepts", "FRAMEWORK", "FLAX_FRAMEWORK",
           "leaves_with_names"]

FRAMEWORK = "jax"
FLAX_FRAMEWORK = "flax"
_CONVERTERS = join(layers.CONVERTERS, ops.CONVERTERS, shape_ops.CONVERTERS)


def accepts(model: Any) -> bool:
    return callable(model)


# --- names -------------------------------------------------------------------------------
def _key_text(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def leaves_with_names(tree: Any, root: str, is_leaf: Callable[[Any], bool] | None = None,
                      bare: str = "output") -> list[tuple[str, Any]]:
    """The leaves of ``tree`` with their key paths joined by "." under ``root`` (``bare``
    for a lone leaf without a root)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    out = []
    for path, leaf in flat:
        parts = ([root] if root else []) + [_key_text(k) for k in path]
        out.append((".".join(parts) or bare, leaf))
    return out


def positional_names(fn: Any, skip: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []
    return params[skip:]


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


# --- checking what the factory returned ----------------------------------------------------
def as_tuple(example_inputs: Any, reference: str, returns: str) -> tuple[Any, ...]:
    """The example inputs as a tuple (one array alone is wrapped)."""
    return example_tuple(example_inputs, reference, single=_is_array, returns=returns)


def checked_params(params: Any, reference: str) -> list[tuple[str, Any]]:
    """The leaves of ``params`` by name; a leaf that is not an array is a FactoryError."""
    named = leaves_with_names(params, "", bare="params")
    for name, leaf in named:
        if not _is_array(leaf) and not isinstance(leaf, (bool, int, float)):
            raise FactoryError(
                f"{reference}: parameter {name!r} is a {type(leaf).__name__}, not an array; "
                "params must be a pytree (dicts, lists, tuples) of JAX or NumPy arrays"
            )
    return named


# --- the trace -----------------------------------------------------------------------------
class Program:
    """What every JAX-family trace shares: ``fn(params, *inputs)`` and how to name things."""

    def __init__(self, fn: Callable[..., Any], params: Any, args: tuple[Any, ...],
                 param_names: list[str], arg_names: Sequence[str],
                 trained: Collection[str] | None = None) -> None:
        self.fn = fn
        self.params = params
        self.param_names = param_names
        # the parameters a training step differentiates (None: all of them); a linen
        # model's batch statistics, an NNX BatchStat, are updated otherwise, not trained
        self.trained = None if trained is None else frozenset(trained)
        flat, self.args_tree = jax.tree_util.tree_flatten(args)
        self.dynamic = [_is_array(leaf) for leaf in flat]
        self.flat_args = flat
        self.input_names = []
        for i, arg in enumerate(args):
            root = arg_names[i] if i < len(arg_names) else f"input{i}"
            self.input_names.extend(n for n, leaf in leaves_with_names(arg, root)
                                    if _is_array(leaf))

    def call(self, params: Any, arrays: Sequence[Any]) -> Any:
        """``fn`` with the array leaves of the inputs replaced by ``arrays`` (other leaves,
        such as Python flags, are passed as given: they are not traced)."""
        it = iter(arrays)
        leaves = [next(it) if dyn else leaf for dyn, leaf in zip(self.dynamic, self.flat_args)]
        return self.fn(params, *jax.tree_util.tree_unflatten(self.args_tree, leaves))

    def arrays(self) -> list[Any]:
        return [leaf for dyn, leaf in zip(self.dynamic, self.flat_args) if dyn]


def _make_jaxpr(program: Program, reference: str) -> tuple[Any, Any]:
    try:
        return jax.make_jaxpr(program.call, return_shape=True)(program.params, program.arrays())
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
            jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError) as err:
        raise TraceError(
            f"{reference}: jax.make_jaxpr could not trace the model: {first_line(err)}; keep "
            "Python control flow off array values (use jnp.where or jax.lax.cond), or run "
            "with --debug for JAX's full report"
        ) from err
    except Exception as err:
        raise TraceError(
            f"{reference}: the model raised {type(err).__name__} while JAX traced it on its "
            f"example inputs: {first_line(err)}; call it on those inputs directly to debug"
        ) from err


def _own_outputs(run: Callable[[], Any], names: Sequence[str], reference: str
                 ) -> dict[str, np.ndarray]:
    try:
        result = run()
    except Exception as err:
        raise TraceError(
            f"{reference}: the model raised {type(err).__name__} when run on its example "
            f"inputs: {first_line(err)}"
        ) from err
    leaves = jax.tree_util.tree_leaves(result)
    return {name: np.array(to_numpy(leaf)) for name, leaf in zip(names, leaves)}


def trace_program(program: Program, *, reference: str, framework: str, native: Any,
                  scopes: Any = None, layer_attrs: Mapping[str, Any] | None = None
                  ) -> TracedModel:
    """Trace ``program`` (under the ``scopes`` context, if any) into a TracedModel;
    ``layer_attrs`` is what the trace records of layers it cannot show (filled by ``scopes``
    while it runs)."""
    with scopes if scopes is not None else contextlib.nullcontext():
        closed, out_shape = _make_jaxpr(program, reference)
    output_names = [name for name, _ in leaves_with_names(out_shape, "")]
    param_arrays = jax.tree_util.tree_leaves(program.params)
    names = program.param_names
    if len(names) != len(param_arrays):  # a leaf that is itself a pytree: number them
        names = [f"param{i}" for i in range(len(param_arrays))]
    converter = JaxprConverter(reference, names, param_arrays, program.input_names,
                               converters=_CONVERTERS, folders=ops.FOLDERS,
                               param_layouts=layers.PARAM_LAYOUTS)
    graph, weights = converter.convert(closed, output_names)
    inputs = {name: np.array(to_numpy(a))
              for name, a in zip(program.input_names, program.arrays())}
    flat = [*param_arrays, *program.arrays()]
    outputs = LazyOutputs(lambda: _own_outputs(lambda: jax.jit(jaxpr_as_fun(closed))(*flat),
                                               output_names, reference), output_names)
    steps, shapes = converter.native_layouts()
    wanted = program.trained if names is program.param_names else None  # (renamed: all)
    trained = [n for n in graph.params if wanted is None or n in wanted]
    own = JaxProgram(closed, names, param_arrays, program.input_names, output_names,
                     trained=trained)
    return TracedModel(graph, weights, inputs, outputs, framework, reference, native=native,
                       program=own,
                       param_layouts={k: v for k, v in steps.items() if k in graph.params},
                       param_shapes={k: v for k, v in shapes.items() if k in graph.params},
                       layer_attrs=dict(layer_attrs or {}))


def _numbers_as_arrays(params: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda x: jax.numpy.asarray(x) if isinstance(x, (bool, int, float)) else x, params)


def trace(apply_fn: Any, params: Any, example_inputs: Any, *,
          reference: str = "<model>") -> TracedModel:
    """Trace a plain JAX function ``apply_fn(params, *inputs)`` into a TracedModel.

    Args:
        apply_fn: the model as a function of its parameters and inputs.
        params: a pytree of arrays (dicts, lists, tuples); each leaf becomes a graph
            parameter named by its key path joined with "." (a bare array: ``params``).
        example_inputs: a tuple of inputs (arrays or pytrees of arrays), or one array.
        reference: the model reference, for messages.

    Raises:
        FactoryError: the factory's values have the wrong kind.
        TraceError: JAX could not trace the function (its reason is in the message).
    """
    returns = "(apply_fn, params, example_inputs)"
    if not callable(apply_fn):
        raise FactoryError(f"{reference}: expected a function apply_fn(params, *inputs) first, "
                           f"got {type(apply_fn).__name__}; a jax factory returns {returns}")
    args = as_tuple(example_inputs, reference, returns)
    names = [name for name, _ in checked_params(params, reference)]
    params = _numbers_as_arrays(params)
    program = Program(apply_fn, params, args, names, positional_names(apply_fn, 1))
    found: dict[str, Any] = {}
    return trace_program(program, reference=reference, framework=FRAMEWORK, native=apply_fn,
                         scopes=_flax_recording(found), layer_attrs=found)


def _flax_recording(found: dict[str, Any]) -> Any:
    """Where Flax is installed, a context recording what linen modules called inside a plain
    function (HF's Flax models) hold that their trace cannot show."""
    try:
        from specgraph.frontends.jax import flax as _flax
    except ImportError:
        return contextlib.nullcontext()
    return _flax.recording(found)


def trace_linen(module: Any, variables: Any, example_inputs: Any, *,
                reference: str = "<model>") -> TracedModel:
    """Trace a Flax linen module applied to ``variables`` (``module.apply(variables, *x)``).

    Parameters are the leaves of ``variables`` named by their collection and module path
    (``params.Dense_0.kernel``, ``batch_stats.BatchNorm_0.mean``); scopes are module paths.
    """
    from specgraph.frontends.jax import flax as _flax

    return _flax.trace_linen(module, variables, example_inputs, reference=reference)


def trace_nnx(module: Any, example_inputs: Any, *, reference: str = "<model>") -> TracedModel:
    """Trace a Flax NNX module in eval mode; parameters are named by their state paths
    (``linear1.kernel``, ``bn.mean``) and scopes are the submodules' attribute paths."""
    from specgraph.frontends.jax import flax as _flax

    return _flax.trace_nnx(module, example_inputs, reference=reference)
