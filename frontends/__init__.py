"""Frontends: one package per framework, and the one registry the front doors look them up in.

Each framework's package (``torch/``, ``jax/``, ``tf/``, ``onnx/``) holds its tracer, its
converters, the runner that executes canonical nodes with the framework's own kernels, and
the writer of its repro scripts. ``FRAMEWORKS`` says, per framework, where each of those is
and which pip extra installs it; ``MODEL_KINDS`` says how a factory's model is recognized
(by the module of its class, without importing anything) and which tracer takes it;
``FILE_FORMATS`` says which package traces a model given as a file (an ``.onnx`` file, a
paper spec ``.yaml``, whose package ``spec/`` has no runner: specs run on the NumPy
reference).
Nothing is imported until it is used; a missing framework is one sentence with the pip
command. The core (``specgraph/``) never imports this package: the front doors
(``specgraph.loading``, ``specgraph.check``, ``specgraph.cli``, ``specgraph.testing``) look
frontends up here and hand what they found down.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from specgraph.errors import FrontendMissingError

__all__ = ["FRAMEWORKS", "MODEL_KINDS", "FILE_FORMATS", "Framework", "ModelKind", "FileFormat",
           "detect", "load", "tracer", "recording", "file_format", "trace_file", "runner", "repro_writer",
           "device_arrays", "native_array"]


@dataclass(frozen=True)
class Framework:
    """One framework's package and what it provides.

    Attributes:
        package: the package (``specgraph.frontends.torch``).
        requires: the top-level module it imports (``torch``, ``tensorflow``...).
        extra: the pip extra that installs it.
        runs: the ``TracedModel.framework`` values its runner executes.
        runner: ``module:Class`` of its Runner, inside the package.
        repro: ``module:name`` of its ReproWriter, inside the package.
        arrays: ``module:Class`` of device arithmetic it provides (None: none).
        from_numpy: whether the package's ``from_numpy`` makes the framework's tensor from a
            NumPy array (for example inputs resized with ``--batch``).
        recorder: ``module:function`` of a context manager that records, while a factory
            runs, what the traced program cannot tell (where each Keras layer was made in
            the user's code), inside the package; None: none.
    """

    package: str
    requires: str
    extra: str
    runs: tuple[str, ...]
    runner: str
    repro: str
    arrays: str | None = None
    from_numpy: bool = False
    recorder: str | None = None


@dataclass(frozen=True)
class ModelKind:
    """A kind of model a factory returns, and the tracer that takes it.

    Attributes:
        framework: the key of its framework in ``FRAMEWORKS``.
        requires: the module its tracer needs (``flax`` for Flax models).
        prefixes: class-module prefixes that identify the kind's models.
        returns: what a factory for this kind returns, in words.
        arity: how many items that tuple has.
        function: the tracer's name in the framework's package.
    """

    framework: str
    requires: str
    prefixes: tuple[str, ...]
    returns: str
    arity: int
    function: str = "trace"


FRAMEWORKS: dict[str, Framework] = {
    "torch": Framework("specgraph.frontends.torch", "torch", "torch", ("torch",),
                       "runner:TorchRunner", "repro:write", "arrays:DeviceArrays",
                       True),
    "jax": Framework("specgraph.frontends.jax", "jax", "jax", ("jax", "flax"),
                     "runner:JaxRunner", "repro:write", None, True),
    "tf": Framework("specgraph.frontends.tf", "tensorflow", "tf", ("tf",), "runner:TfRunner",
                    "repro:write", None, True, "origins:recording"),
    "onnx": Framework("specgraph.frontends.onnx", "onnx", "onnx", ("onnx",),
                      "runner:OnnxRunner", "repro:write"),
}

MODEL_KINDS: dict[str, ModelKind] = {
    "torch": ModelKind("torch", "torch", ("torch.",), "(module, example_inputs)", 2),
    "flax_linen": ModelKind("jax", "flax", ("flax.linen.",),
                            "(module, variables, example_inputs)", 3, "trace_linen"),
    "flax_nnx": ModelKind("jax", "flax", ("flax.nnx.",), "(module, example_inputs)", 2,
                          "trace_nnx"),
    "jax": ModelKind("jax", "jax", ("jax.", "jaxlib."), "(apply_fn, params, example_inputs)",
                     3),
    "onnx": ModelKind("onnx", "onnx", ("onnx.",), "(onnx.ModelProto, example_inputs)", 2,
                      "trace_model"),
    "tf": ModelKind("tf", "tensorflow", ("keras.", "tf_keras.", "tensorflow."),
                    "(model, example_inputs)", 2),
}

@dataclass(frozen=True)
class FileFormat:
    """A model given as a file rather than a factory.

    Attributes:
        package: the package whose ``trace_file(path, reference=...)`` traces it.
        requires: the module it needs (a pip extra installs it), or None when specgraph's
            own dependencies suffice.
        extra: that pip extra.
        describes: the file, in words (``an .onnx file``).
        batch: why ``--batch`` does not apply to it.
    """

    package: str
    requires: str | None
    extra: str
    describes: str
    batch: str


_SPEC = FileFormat("specgraph.frontends.spec", None, "", "a paper spec (.yaml)",
                   "a spec's sizes are its dims; set the batch size in dims")
FILE_FORMATS: dict[str, FileFormat] = {
    ".onnx": FileFormat("specgraph.frontends.onnx", "onnx", "onnx", "an .onnx file",
                        "an .onnx file's batch size is fixed by its example inputs; drop "
                        "--batch for ONNX models"),
    ".yaml": _SPEC,
    ".yml": _SPEC,
}


# A plain Python function (or functools.partial) first in the factory's tuple is a JAX
# apply_fn: its class says nothing about the framework.
PLAIN_FUNCTION_KIND = "jax"


def _import(module: str, framework: Framework, what: str) -> ModuleType:
    """Import ``module``; a missing framework is one sentence with the pip command."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top and top != "specgraph":
            raise FrontendMissingError(
                f"{what} needs {top}: pip install 'specgraph-check[{framework.extra}]'"
            ) from err
        raise


def _entry(framework: Framework, spec: str, what: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(_import(f"{framework.package}.{module}", framework, what), name)


def load(kind: str) -> ModuleType:
    """The package of model kind ``kind``'s framework, imported (its tracers)."""
    info = MODEL_KINDS[kind]
    framework = FRAMEWORKS[info.framework]
    try:
        return importlib.import_module(framework.package)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in (info.requires, framework.requires):
            raise FrontendMissingError(
                f"{kind} frontend needs {err.name.split('.')[0]}: "
                f"pip install 'specgraph-check[{framework.extra}]'"
            ) from err
        raise


def file_format(reference: str) -> FileFormat | None:
    """The format of a model reference that names a file by its suffix, or None (a
    factory)."""
    return next((f for suffix, f in FILE_FORMATS.items() if reference.endswith(suffix)), None)


def trace_file(path: Any, reference: str, **options: Any) -> Any:
    """The TracedModel of the model file at ``path`` (its format known by its suffix);
    ``options`` go to the format's tracer (an ONNX file's input ``shapes``, a spec's
    ``dims`` and ``fills``)."""
    fmt = file_format(reference)
    if fmt is None:
        raise ValueError(f"{reference} is not a model file of a known format")
    what = f"{fmt.describes.split(' (')[0].removeprefix('an ').removeprefix('a ')} frontend"
    if fmt.requires is None:
        package = importlib.import_module(fmt.package)
    else:
        framework = Framework(fmt.package, fmt.requires, fmt.extra, (), "", "")
        package = _import(fmt.package, framework, what)
    return package.trace_file(path, reference=reference, **options)


def tracer(kind: str) -> Callable[..., Any]:
    """The function that traces a factory's result of model kind ``kind``."""
    return getattr(load(kind), MODEL_KINDS[kind].function)


def detect(model: Any) -> str | None:
    """The model kind whose framework defined ``model``'s class (by class module, no
    imports), or None."""
    if isinstance(model, (types.FunctionType, functools.partial)):
        return PLAIN_FUNCTION_KIND
    for cls in type(model).__mro__:
        module = getattr(cls, "__module__", "") or ""
        for name, info in MODEL_KINDS.items():
            if any(module == p.rstrip(".") or module.startswith(p) for p in info.prefixes):
                return name
    return None


def _running(traced_framework: str) -> Framework | None:
    return next((f for f in FRAMEWORKS.values() if traced_framework in f.runs), None)


def runner(traced_framework: str, context: Any) -> Any:
    """A Runner for models of ``TracedModel.framework`` ``traced_framework``, set to
    ``context``; the NumPy reference for a framework no package runs (a paper spec)."""
    framework = _running(traced_framework)
    if framework is None:
        from specgraph.numeric.runner import ReferenceRunner

        return ReferenceRunner(context)
    cls = _entry(framework, framework.runner, f"running {traced_framework} models")
    return cls(context)


def repro_writer(traced_framework: str) -> Any:
    """The ReproWriter for ``TracedModel.framework`` ``traced_framework`` (None: none)."""
    framework = _running(traced_framework)
    if framework is None:
        return None
    return _entry(framework, framework.repro, f"a {traced_framework} repro script")


def recording() -> contextlib.AbstractContextManager[None]:
    """While a factory runs: the recorder of each framework the user's code has already
    imported (nothing is imported for it)."""
    stack = contextlib.ExitStack()
    for framework in FRAMEWORKS.values():
        if framework.recorder is not None and framework.requires in sys.modules:
            stack.enter_context(_entry(framework, framework.recorder, "recording sources")())
    return stack


def device_arrays() -> Any:
    """Arithmetic on a GPU, from the first framework that provides it."""
    for framework in FRAMEWORKS.values():
        if framework.arrays is not None:
            return _entry(framework, framework.arrays, "comparing on a GPU")()
    raise FrontendMissingError("comparing on a GPU needs a framework that measures there: "
                               "pip install 'specgraph-check[torch]'")


def native_array(leaf: Any, data: Any) -> Any:
    """NumPy ``data`` as the same kind of array as ``leaf`` (a framework's tensor, or NumPy
    when ``leaf`` is one or no framework makes it)."""
    kind = detect(leaf) if not isinstance(leaf, (types.FunctionType, functools.partial)) \
        else None
    framework = FRAMEWORKS[MODEL_KINDS[kind].framework] if kind else None
    if framework is None or not framework.from_numpy:
        return data
    return _import(framework.package, framework, "resizing example inputs").from_numpy(data)
