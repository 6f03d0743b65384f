"""Flax linen and NNX on top of the JAX frontend: parameter names and module-path scopes.

Scopes. Each submodule call is traced inside ``jax.named_scope`` of a name that carries the
module's path behind a mark (``_jax_walk.SCOPE_MARK``), and the scope of an equation is the
innermost marked path (plus any scope the user opened inside that module):

* linen: ``flax.linen.intercept_methods``, Flax's public hook around module methods, opens
  the scope with ``module.path`` while the trace runs;
* NNX modules carry no path and ``module(x)`` looks ``__call__`` up on the class, so the
  trace runs on a private copy (``nnx.merge`` of the module's split state, put in eval mode
  as ``Module.eval()`` does) whose submodules are given a subclass whose ``__call__`` opens
  the scope of the instance's path. Only that copy is touched: the user's module and
  classes are left as they are (the subclasses are cached, one per class).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import jax
from flax import linen, nnx

from specgraph.errors import FactoryError
from specgraph.frontends.jax import tracer as jax_frontend
from specgraph.frontends.jax.walk import SCOPE_MARK
from specgraph.model import TracedModel

__all__ = ["trace_linen", "trace_nnx"]


# --- what an inference trace cannot show ------------------------------------------------
def _training_attrs(module: Any) -> dict[str, float]:
    """A batch norm's momentum in PyTorch's convention (Flax keeps ``momentum`` of the old
    average, as Keras does): the running averages it updates are not in an eval trace."""
    momentum = getattr(module, "momentum", None)
    if isinstance(module, (linen.BatchNorm, nnx.BatchNorm)) and isinstance(
            momentum, (int, float)):
        return {"momentum": round(1.0 - float(momentum), 12)}
    return {}


def _linen_recorder(found: dict[str, dict[str, Any]]) -> Any:
    """An interceptor that records the training attributes of each linen module called."""
    def record(next_fun: Any, args: Any, kwargs: Any, context: Any) -> Any:
        if context.method_name != "setup":
            attrs = _training_attrs(context.module)
            if attrs:
                found[".".join(str(p) for p in context.module.path)] = attrs
        return next_fun(*args, **kwargs)
    return record


def recording(found: dict[str, dict[str, Any]]) -> Any:
    """A context in which linen modules called by any JAX function (HF's Flax models) have
    their training attributes recorded into ``found``, by module path."""
    return linen.intercept_methods(_linen_recorder(found))


# --- linen -------------------------------------------------------------------------------
def _linen_scope(next_fun: Any, args: Any, kwargs: Any, context: Any) -> Any:
    if context.method_name == "setup":
        return next_fun(*args, **kwargs)
    path = ".".join(str(p) for p in context.module.path)
    with jax.named_scope(SCOPE_MARK + path):
        return next_fun(*args, **kwargs)


def trace_linen(module: Any, variables: Any, example_inputs: Any, *,
                reference: str = "<model>") -> TracedModel:
    """See ``specgraph.frontends.jax.trace_linen``."""
    returns = "(module, variables, example_inputs)"
    if not isinstance(module, linen.Module):
        raise FactoryError(f"{reference}: expected a flax.linen.Module first, got "
                           f"{type(module).__name__}; a linen factory returns {returns}")
    if not isinstance(variables, dict) and not hasattr(variables, "keys"):
        raise FactoryError(f"{reference}: variables must be the dict that module.init(...) "
                           f"returns, got {type(variables).__name__}; return {returns}")
    args = jax_frontend.as_tuple(example_inputs, reference, returns)
    named = jax_frontend.checked_params(variables, reference)
    names = [n for n, _ in named]
    # a training step differentiates the "params" collection; the others (batch_stats,
    # a cache) it updates or holds, as PyTorch's buffers
    trained = [n for n in names if n.split(".", 1)[0] == "params"] \
        if "params" in variables else None
    program = jax_frontend.Program(module.apply, variables, args, names,
                                    jax_frontend.positional_names(module.__call__, 0),
                                    trained=trained)
    found: dict[str, dict[str, Any]] = {}
    scopes = contextlib.ExitStack()
    scopes.enter_context(linen.intercept_methods(_linen_scope))
    scopes.enter_context(recording(found))
    return jax_frontend.trace_program(
        program, reference=reference, framework=jax_frontend.FLAX_FRAMEWORK, native=module,
        scopes=scopes, layer_attrs=found)


# --- NNX ---------------------------------------------------------------------------------
_NNX_PATHS: contextvars.ContextVar[dict[int, str]] = contextvars.ContextVar(
    "specgraph_nnx_paths", default={})
_SCOPED_CLASSES: dict[type, type] = {}


def _scoped_class(cls: type) -> type:
    """A subclass of ``cls`` whose ``__call__`` runs inside the named scope of the
    instance's path (looked up in the paths of the trace in progress)."""
    scoped = _SCOPED_CLASSES.get(cls)
    if scoped is None:
        call = cls.__call__

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            path = _NNX_PATHS.get().get(id(self))
            if path is None:
                return call(self, *args, **kwargs)
            with jax.named_scope(SCOPE_MARK + path):
                return call(self, *args, **kwargs)

        scoped = type(cls.__name__, (cls,), {"__call__": __call__,
                                             "__module__": cls.__module__,
                                             "__qualname__": cls.__qualname__})
        _SCOPED_CLASSES[cls] = scoped
    return scoped


# what Module.eval() sets, on every module that has the attribute
_EVAL_ATTRIBUTES = ("deterministic", "use_running_average")


def _prepared(graphdef: Any, state: Any) -> tuple[Any, dict[int, str]]:
    """A private copy of the module in eval mode whose submodules open their path as a scope
    when called, and the path of each (one walk over the graph does both)."""
    copy = nnx.merge(graphdef, state)
    paths: dict[int, str] = {}
    for path, node in nnx.iter_graph(copy):
        if not isinstance(node, nnx.Module):
            continue
        for name in _EVAL_ATTRIBUTES:
            if hasattr(node, name):
                setattr(node, name, True)
        if path and callable(getattr(type(node), "__call__", None)):
            paths.setdefault(id(node), ".".join(str(p) for p in path))
            node.__class__ = _scoped_class(type(node))
    return copy, paths


@contextlib.contextmanager
def _scopes(paths: dict[int, str]) -> Iterator[None]:
    token = _NNX_PATHS.set(paths)
    try:
        yield
    finally:
        _NNX_PATHS.reset(token)


def _state_names(state: Any) -> tuple[list[str], list[str]]:
    """One name per array leaf of an NNX state, by variable path ("." joined), and the
    names of the ``nnx.Param`` leaves (what a training step differentiates; a BatchStat is
    updated otherwise)."""
    names, trained = [], []
    for path, variable in jax_frontend.leaves_with_names(
            state, "", is_leaf=lambda x: isinstance(x, nnx.Variable)):
        leaves = jax_frontend.leaves_with_names(variable, path)
        if isinstance(variable, nnx.Variable):
            leaves = jax_frontend.leaves_with_names(variable.get_value(), path)
        found = [name for name, _ in leaves]
        names.extend(found)
        if not isinstance(variable, nnx.Variable) or isinstance(variable, nnx.Param):
            trained.extend(found)
    return names, trained


def trace_nnx(module: Any, example_inputs: Any, *, reference: str = "<model>") -> TracedModel:
    """See ``specgraph.frontends.jax.trace_nnx``."""
    returns = "(module, example_inputs)"
    if not isinstance(module, nnx.Module):
        raise FactoryError(f"{reference}: expected a flax.nnx.Module first, got "
                           f"{type(module).__name__}; an NNX factory returns {returns}")
    args = jax_frontend.as_tuple(example_inputs, reference, returns)
    graphdef, state = nnx.split(module)
    names, trained = _state_names(state)

    def apply(state: Any, *inputs: Any) -> Any:
        copy, paths = _prepared(graphdef, state)
        with _scopes(paths):
            return copy(*inputs)

    program = jax_frontend.Program(apply, state, args, names,
                                    jax_frontend.positional_names(module.__call__, 0),
                                    trained=trained)
    found = {".".join(str(p) for p in path): attrs for path, node in nnx.iter_graph(module)
             if path and (attrs := _training_attrs(node))}
    return jax_frontend.trace_program(
        program, reference=reference, framework=jax_frontend.FLAX_FRAMEWORK, native=module,
        layer_attrs=found)
