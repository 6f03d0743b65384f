"""External tensor data of an ONNX model: found everywhere in it, read only from its folder.

An ONNX tensor may keep its bytes in another file (``data_location == EXTERNAL`` with
``location``/``offset``/``length`` entries). Such tensors hide in many places: graph and
subgraph initializers, sparse initializers, tensor attributes (``Constant``'s ``value`` and
``sparse_value``), the nodes and attribute defaults of model-local functions, and training
graphs. ``load`` reads every one of them into ``raw_data`` after checking that the file lies
inside the model's folder and the range inside the file, so that onnxruntime, which is given
the model as bytes, never resolves a path itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath

import onnx

from specgraph.errors import TraceError

__all__ = ["owners", "attributes", "tensors", "external", "load"]

_DIGITS = re.compile(r"[0-9]+")


Owner = onnx.GraphProto | onnx.FunctionProto


def owners(model: onnx.ModelProto) -> Iterator[tuple[str, Owner]]:
    """Every graph and function of ``model``, subgraphs at any depth included, each with a
    phrase saying where it is ("" for the main graph).

    The walk is iterative, so deeply nested subgraphs cannot exhaust Python's recursion.
    """
    stack: list[tuple[str, Owner]] = [("", model.graph)]
    stack += [(f" in function '{f.domain}.{f.name}'", f) for f in model.functions]
    for info in model.training_info:
        stack += [(" in a training graph", info.initialization),
                  (" in a training graph", info.algorithm)]
    while stack:
        where, owner = stack.pop()
        yield where, owner
        for attr, label in attributes(owner, where):
            graphs = [attr.g] * attr.HasField("g") + list(attr.graphs)
            stack += [(f" in the subgraph of {label}", g) for g in graphs]


def attributes(owner: Owner, where: str) -> Iterator[tuple[onnx.AttributeProto, str]]:
    """The attributes of ``owner``'s nodes (and a function's attribute defaults), each with
    a phrase naming it."""
    if isinstance(owner, onnx.FunctionProto):
        for attr in owner.attribute_proto:
            yield attr, f"default of attribute {attr.name!r}{where}"
    for node in owner.node:
        for attr in node.attribute:
            yield attr, f"attribute {attr.name!r} of node {node.name!r} ({node.op_type}){where}"


def tensors(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.TensorProto]]:
    """Every tensor stored anywhere in ``model``, each with a phrase saying where it is."""
    for where, owner in owners(model):
        if isinstance(owner, onnx.GraphProto):
            yield from ((f"initializer {t.name!r}{where}", t) for t in owner.initializer)
            for sparse in owner.sparse_initializer:
                label = f"sparse initializer {sparse.values.name!r}{where}"
                yield from ((label, t) for t in (sparse.values, sparse.indices))
        for attr, label in attributes(owner, where):
            if attr.HasField("t"):
                yield label, attr.t
            yield from ((label, t) for t in attr.tensors)
            sparse = [attr.sparse_tensor] * attr.HasField("sparse_tensor")
            for s in (*sparse, *attr.sparse_tensors):
                yield from ((label, t) for t in (s.values, s.indices))


def external(model: onnx.ModelProto) -> list[tuple[str, onnx.TensorProto]]:
    """The tensors of ``model`` that keep their data in another file."""
    return [(label, t) for label, t in tensors(model)
            if t.data_location == onnx.TensorProto.EXTERNAL]


def load(model: onnx.ModelProto, folder: Path, reference: str) -> None:
    """Read every external tensor of ``model`` into ``raw_data``, only from inside ``folder``.

    Afterwards no tensor of ``model`` refers to a file.

    Raises:
        TraceError: a reference names no file, a file outside ``folder`` (absolute path,
            ``..``, a link leading out, a NUL byte), or an offset or length that is not a
            non-negative integer or reaches past the end of the file (one sentence).
    """
    root = folder.resolve()
    for label, tensor in external(model):
        info = {e.key: e.value for e in tensor.external_data}
        target = _confined(root, info.get("location", ""), label, reference)
        size = target.stat().st_size
        offset = _integer(info, "offset", label, reference)
        length = _integer(info, "length", label, reference)
        offset = offset or 0
        if offset > size or length is not None and offset + length > size:
            raise TraceError(
                f"{reference}: the external data of {label} (offset {offset}, length "
                f"{'to the end' if length is None else length}) reaches past the end of "
                f"{target.name}, which holds {size} bytes; export the model again")
        length = size - offset if length is None else length
        with open(target, "rb") as handle:
            handle.seek(offset)
            tensor.raw_data = handle.read(length)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _integer(info: dict[str, str], key: str, label: str, reference: str) -> int | None:
    value = info.get(key)
    if value is None:
        return None
    if not _DIGITS.fullmatch(value):
        raise TraceError(f"{reference}: the external data {key} of {label} is {value!r}, "
                         "not a non-negative integer; export the model again")
    return int(value)


def _confined(root: Path, location: str, label: str, reference: str) -> Path:
    if not location:
        raise TraceError(f"{reference}: {label} keeps its data in an external file but names "
                         "none (no 'location'); export the model again")
    posix, windows = PurePosixPath(location), PureWindowsPath(location)
    escapes = ("\0" in location or posix.is_absolute() or windows.is_absolute()
               or bool(windows.drive) or ".." in posix.parts or ".." in windows.parts)
    target = root
    if not escapes:
        try:
            target = (root / location).resolve()
        except (OSError, ValueError):  # a loop of links
            escapes = True
    if escapes or not target.is_relative_to(root):
        raise TraceError(
            f"{reference}: {label} keeps its data in {location!r}, outside the model's folder; "
            "specgraph reads external data only from files next to the model (relative paths "
            "without '..' or links leading out)")
    if not target.is_file():
        raise TraceError(f"{reference}: external data file {location!r} of {label} does not "
                         "exist next to the model; copy it there")
    return target
