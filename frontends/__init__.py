"""Frontends: one module per source, each loaded only when a model of its kind is traced."""

from __future__ import annotations

import functools
import importlib
import types
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from specgraph.errors import FrontendMissingError

__all__ = ["FRONTENDS", "FrontendInfo", "RUNNERS", "load", "detect", "runner_class"]


@dataclass(frozen=True)
class FrontendInfo:
    """What specgraph knows about a frontend before importing it.

    Attributes:
        module: the module that implements ``trace(*factory_result, reference=...)``.
        framework: the package it imports.
        extra: the pip extra that installs that package.
        prefixes: class-module prefixes that identify the framework's models.
        returns: what a factory for this framework returns, in words.
        arity: how many items that tuple has.
        function: the name of the frontend function that traces the factory's result.
    """

    module: str
    framework: str
    extra: str
    prefixes: tuple[str, ...]
    returns: str
    arity: int
    function: str = "trace"


FRONTENDS: dict[str, FrontendInfo] = {
    "torch": FrontendInfo("specgraph.frontends.torch", "torch", "torch", ("torch.",),
                          "(module, example_inputs)", 2),
    "flax_linen": FrontendInfo("specgraph.frontends.jax", "flax", "jax", ("flax.linen.",),
                               "(module, variables, example_inputs)", 3, "trace_linen"),
    "flax_nnx": FrontendInfo("specgraph.frontends.jax", "flax", "jax", ("flax.nnx.",),
                             "(module, example_inputs)", 2, "trace_nnx"),
    "jax": FrontendInfo("specgraph.frontends.jax", "jax", "jax", ("jax.", "jaxlib."),
                        "(apply_fn, params, example_inputs)", 3),
    "onnx": FrontendInfo("specgraph.frontends.onnx", "onnx", "onnx", ("onnx.",),
                         "(onnx.ModelProto, example_inputs)", 2, "trace_model"),
    "tf": FrontendInfo("specgraph.frontends.tf", "tensorflow", "tf",
                       ("keras.", "tf_keras.", "tensorflow."), "(model, example_inputs)", 2),
}

# A plain Python function (or functools.partial) first in the factory's tuple is a JAX
# apply_fn: its class says nothing about the framework.
PLAIN_FUNCTION_FRONTEND = "jax"


def load(name: str) -> ModuleType:
    """Import frontend ``name``; a missing framework is one sentence with the pip command."""
    info = FRONTENDS[name]
    try:
        return importlib.import_module(info.module)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] == info.framework:
            raise FrontendMissingError(
                f"{name} frontend needs {info.framework}: "
                f"pip install 'specgraph-check[{info.extra}]'"
            ) from err
        raise


def detect(model: Any) -> str | None:
    """The frontend whose framework defined ``model``'s class (by class module, no imports)."""
    if isinstance(model, (types.FunctionType, functools.partial)):
        return PLAIN_FUNCTION_FRONTEND
    for cls in type(model).__mro__:
        module = getattr(cls, "__module__", "") or ""
        for name, info in FRONTENDS.items():
            if any(module == p.rstrip(".") or module.startswith(p) for p in info.prefixes):
                return name
    return None


# Runners (specgraph.numeric.runner) per TracedModel.framework: module and class.
RUNNERS: dict[str, tuple[str, str, str]] = {
    "torch": ("specgraph.frontends.torch.runner", "TorchRunner", "torch"),
    "jax": ("specgraph.frontends.jax.runner", "JaxRunner", "jax"),
    "flax": ("specgraph.frontends.jax.runner", "JaxRunner", "jax"),
    "tf": ("specgraph.frontends.tf.runner", "TfRunner", "tf"),
    "onnx": ("specgraph.frontends.onnx.runner", "OnnxRunner", "onnx"),
}


def runner_class(framework: str) -> type:
    """The Runner class that executes canonical nodes with ``framework``'s own kernels."""
    from specgraph.numeric.runner import ReferenceRunner

    if framework not in RUNNERS:
        return ReferenceRunner
    module, cls, extra = RUNNERS[framework]
    try:
        return getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as err:
        if err.name and not err.name.startswith("specgraph"):
            raise FrontendMissingError(
                f"running {framework} models needs {err.name.split('.')[0]}: "
                f"pip install 'specgraph-check[{extra}]'") from err
        raise
