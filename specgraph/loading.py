"""Model references: ``path/to/file.py:factory`` resolved, run, and handed to a frontend.

Loading a factory runs the user's own Python code, as pytest does with test files.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgraph.errors import FactoryError, ModelReferenceError, TraceError, first_line
from specgraph.model import TracedModel

__all__ = ["trace", "check_shapes", "call_factory", "parse_reference"]

_FORMS = "path/to/file.py:factory"


def parse_reference(reference: str) -> tuple[Path, str]:
    """Split ``file.py:factory``; raise ModelReferenceError with the fix if it is malformed."""
    path_text, sep, factory = reference.rpartition(":")
    if not sep:
        path_text, factory = reference, ""
    path = Path(path_text)
    if not path.exists():
        raise ModelReferenceError(
            f"model reference {reference!r}: file {path_text} does not exist; "
            f"pass {_FORMS}"
        )
    if path.suffix != ".py" or not path.is_file():
        raise ModelReferenceError(
            f"model reference {reference!r}: {path_text} is not a Python file; pass {_FORMS}"
        )
    try:
        path.open("rb").close()
    except OSError as err:
        raise ModelReferenceError(
            f"model reference {reference!r}: {path_text} cannot be read ({err.strerror}); "
            "check its permissions") from err
    if not factory:
        names = ", ".join(_public_functions(path)) or "none"
        raise ModelReferenceError(
            f"model reference {reference!r} names no factory; pass {path_text}:NAME "
            f"(functions in the file: {names})"
        )
    return path, factory


def _public_functions(path: Path) -> list[str]:
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return []
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)
            and not n.name.startswith("_")]


@contextlib.contextmanager
def _script_directory(path: Path) -> Iterator[None]:
    """Let the factory file import its neighbours, as ``python file.py`` would."""
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


@contextlib.contextmanager
def contained(reference: str, what: str, fix: str, error: type[FactoryError | TraceError]
              = FactoryError) -> Iterator[None]:
    """Run the user's code meanwhile: ``sys.exit`` and any other ``BaseException`` it raises
    (``KeyboardInterrupt`` aside, which stays an interruption) become ``error``, one
    sentence naming ``what`` ran and ``fix``. ``Exception``s pass for the caller to word."""
    try:
        yield
    except (Exception, KeyboardInterrupt):
        raise
    except SystemExit as err:
        raise error(f"model reference {reference!r}: {what} called sys.exit({err.code!r}); "
                    f"{fix}") from err
    except BaseException as err:  # noqa: BLE001  (GeneratorExit, a user's BaseException)
        raise error(f"model reference {reference!r}: {what} raised {type(err).__name__} "
                    f"(a BaseException): {first_line(err)}; {fix}") from err


def _import_file(path: Path, reference: str) -> Any:
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    name = f"specgraph_user_{resolved.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ModelReferenceError(f"model reference {reference!r}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    try:
        with _script_directory(path), contained(
                reference, f"importing {path}", "guard that code with "
                "if __name__ == '__main__' so that importing the file does not run it"):
            spec.loader.exec_module(module)
    except BaseException as err:
        del sys.modules[name]
        if not isinstance(err, Exception) or isinstance(err, FactoryError):
            raise
        raise FactoryError(
            f"model reference {reference!r}: importing {path} raised "
            f"{type(err).__name__}: {first_line(err)}; fix the file or pass --debug for the "
            "traceback"
        ) from err
    return module


def call_factory(reference: str) -> tuple[str, tuple[Any, ...]]:
    """Import the file, call the factory, and check what it returned.

    Returns:
        the model kind (a key of ``specgraph.frontends.MODEL_KINDS``) and the factory's
        result as a tuple.
    """
    from specgraph import frontends

    path, factory_name = parse_reference(reference)
    module = _import_file(path, reference)
    factory = getattr(module, factory_name, None)
    if factory is None:
        names = ", ".join(_public_functions(path)) or "none"
        raise ModelReferenceError(
            f"model reference {reference!r}: {path} has no factory {factory_name!r}; "
            f"functions in the file: {names}"
        )
    if not callable(factory):
        raise ModelReferenceError(
            f"model reference {reference!r}: {factory_name} is a "
            f"{type(factory).__name__}, not a function; name a function that takes no "
            "arguments and returns the model and its example inputs"
        )
    try:
        with _script_directory(path), contained(
                reference, f"the factory {factory_name}", "a factory returns the model and "
                "its example inputs; run it directly or pass --debug for the traceback"), \
                frontends.recording():
            result = factory()
    except FactoryError:
        raise
    except Exception as err:
        raise FactoryError(
            f"model reference {reference!r}: the factory raised {type(err).__name__}: "
            f"{first_line(err)}; run it directly or pass --debug for the traceback"
        ) from err
    items = result if isinstance(result, tuple) else (result,)
    name = frontends.detect(items[0]) if items else None
    if name is None:
        known = "; ".join(f"{n}: {i.returns}" for n, i in frontends.MODEL_KINDS.items())
        raise FactoryError(
            f"model reference {reference!r}: the factory returned {_describe(result)}, which "
            f"is no model specgraph knows; return one of {known}"
        )
    info = frontends.MODEL_KINDS[name]
    if len(items) != info.arity:
        raise FactoryError(
            f"model reference {reference!r}: the factory returned {_describe(result)}; a "
            f"{name} factory returns {info.returns}"
        )
    return name, items


def _describe(result: Any) -> str:
    if isinstance(result, tuple):
        kinds = ", ".join(type(r).__name__ for r in result)
        return f"a {len(result)}-tuple ({kinds})"
    return f"a {type(result).__name__}"


def with_batch(items: tuple[Any, ...], batch: int, reference: str) -> tuple[Any, ...]:
    """The factory's result with its example inputs (the last item) resized to ``batch``
    along their first axis: rows repeated in turn, or the first ``batch`` rows kept, each
    as the same kind of array it was."""
    from specgraph import frontends

    def resize(leaf: Any) -> Any:
        if isinstance(leaf, dict):
            return {k: resize(v) for k, v in leaf.items()}
        if isinstance(leaf, (tuple, list)):
            return type(leaf)(resize(v) for v in leaf)
        if not hasattr(leaf, "shape") or len(leaf.shape) == 0:
            return leaf
        data = np.asarray(leaf)
        data = np.ascontiguousarray(np.take(data, np.arange(batch) % data.shape[0], axis=0))
        return frontends.native_array(leaf, data)

    if batch < 1:
        raise ModelReferenceError(f"--batch {batch}: a batch holds at least one example")
    return (*items[:-1], resize(items[-1]))


def trace(reference: str, *, batch: int | None = None,
          shapes: Mapping[str, Sequence[int]] | None = None, shared_shapes: bool = False,
          **file_options: Any) -> TracedModel:
    """Trace the model that ``reference`` names into a TracedModel.

    Args:
        reference: ``path/to/file.py:factory``, an ``.onnx`` file or a paper spec ``.yaml``.
        batch: trace with the example inputs resized to this many examples.
        shapes: sizes of an ``.onnx`` file's inputs by name (``--input-shape``).
        shared_shapes: ``shapes`` are meant for either side of a diff: names this model
            has no input of, and a factory reference, leave them aside (the caller checks
            them with ``check_shapes``).
        file_options: for a model file, options of its format's tracer (a spec's ``dims``
            and ``fills``).

    Raises:
        SpecgraphError: the reference, the factory or the trace failed (one sentence).
    """
    from specgraph import frontends

    fmt = frontends.file_format(reference)
    if fmt is not None:
        path = Path(reference)
        if not path.is_file():
            raise ModelReferenceError(f"model reference {reference!r}: file {reference} does "
                                      f"not exist; pass the path of {fmt.describes}")
        if batch is not None:
            raise ModelReferenceError(f"model reference {reference!r}: {fmt.batch}")
        if reference.endswith(".onnx"):
            return frontends.trace_file(path, reference, shapes=shapes,
                                        shared_shapes=shared_shapes, **file_options)
        if shapes and not shared_shapes:
            raise ModelReferenceError(
                f"model reference {reference!r}: --input-shape sizes the inputs of .onnx "
                "files; a paper spec states its own sizes in dims:")
        return frontends.trace_file(path, reference, **file_options)
    if shapes and not shared_shapes:
        raise ModelReferenceError(
            f"model reference {reference!r}: --input-shape sizes the inputs of .onnx files, "
            "and a factory's example inputs fix its own; return inputs of the sizes you want")
    kind, items = call_factory(reference)
    if batch is not None:
        items = with_batch(items, batch, reference)
    with contained(reference, "the model, while specgraph traced it,", "a model's forward "
                   "computes its outputs; pass --debug for the traceback", TraceError):
        traced = frontends.tracer(kind)(*items, reference=reference)
    if not traced.graph.outputs:
        raise ModelReferenceError(
            f"model reference {reference!r}: the model returns no tensor (its forward "
            "returned None or an empty structure); return the outputs to compare")
    return traced


def check_shapes(shapes: Mapping[str, Sequence[int]], references: Sequence[str],
                 traced: Sequence[TracedModel] = ()) -> None:
    """Refuse ``--input-shape`` sizes that no ``.onnx`` model among ``references`` can take:
    before tracing (``traced`` empty) where none is an ``.onnx`` file, after it where a name
    is an input of none of them.

    Raises:
        ModelReferenceError: one sentence naming the models and their inputs.
    """
    onnx_refs = [r for r in references if r.endswith(".onnx")]
    if shapes and not onnx_refs:
        raise ModelReferenceError(
            f"--input-shape sizes the inputs of .onnx files, and {' and '.join(references)} "
            f"{'is none' if len(references) == 1 else 'are none'}; a factory's example inputs "
            "fix its own")
    models = [t for t in traced if t.reference in onnx_refs]
    for name in shapes if models else ():
        if not any(name in t.inputs for t in models):
            have = " or ".join(f"{t.reference} (inputs: {', '.join(t.inputs) or 'none'})"
                               for t in models)
            raise ModelReferenceError(f"--input-shape names {name!r}, which is no input of "
                                      f"{have}; pass the name of an input")
