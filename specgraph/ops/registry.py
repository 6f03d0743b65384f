"""The op registry: one ``OpSpec`` per canonical op (attributes, reference, equation rule)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgraph.errors import GraphError

__all__ = [
    "REQUIRED",
    "Attr",
    "OpSpec",
    "register",
    "op",
    "get_spec",
    "registered_ops",
    "is_registered",
    "OPAQUE",
]

OPAQUE = "opaque"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

_KINDS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float, np.floating, np.integer))
    and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, (bool, np.bool_)),
    "str": lambda v: isinstance(v, str),
    "ints": lambda v: isinstance(v, (tuple, list)) and all(_KINDS["int"](i) for i in v),
    "floats": lambda v: isinstance(v, (tuple, list)) and all(_KINDS["float"](i) for i in v),
}


def _coerce(kind: str, value: Any) -> Any:
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        return bool(value)
    if kind == "ints":
        return tuple(int(v) for v in value)
    if kind == "floats":
        return tuple(float(v) for v in value)
    return value


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its kind, default and meaning.

    Args:
        kind: ``int``, ``float``, ``bool``, ``str``, ``ints`` or ``floats``.
        default: the value when a frontend leaves it out; ``REQUIRED`` if it must be given.
        optional: whether ``None`` is an allowed value.
        choices: allowed values for ``str`` attributes.
        doc: what it means, in canonical units and conventions.
        affects: for an attribute that changes nothing the forward pass computes, what a
            difference in it changes (``training: the padding row's gradient``): such a
            difference is reported as such, and numbers never explain it away.
    """

    kind: str
    default: Any = REQUIRED
    optional: bool = False
    choices: tuple[str, ...] = ()
    doc: str = ""
    affects: str = ""

    def check(self, op_name: str, name: str, value: Any) -> Any:
        if value is None and self.optional:
            return None
        if not _KINDS[self.kind](value):
            raise GraphError(
                f"op {op_name!r}: attribute {name!r} must be {self.kind}, got {value!r}"
            )
        value = _coerce(self.kind, value)
        if self.choices and value not in self.choices:
            raise GraphError(
                f"op {op_name!r}: attribute {name!r} must be one of {list(self.choices)}, "
                f"got {value!r}"
            )
        return value


@dataclass(frozen=True)
class OpSpec:
    """Everything the rest of specgraph knows about one canonical op.

    Args:
        name: the canonical name (snake case of the ONNX operator where one exists).
        inputs: input names in order; ``"bias?bias"`` means the input exists only when the
            attribute ``bias`` is true; ``"*xs"`` takes any number of inputs.
        attrs: attribute schema.
        reference: NumPy implementation ``reference(*arrays, **attrs)`` computing in the
            dtype it is given (the interpreter gives float64); returns an array, or a tuple
            for ops with several outputs.
        equation: sympy rule ``equation(*exprs, **attrs)`` or None (rendered as a call).
        category: ``layer``, ``activation``, ``elementwise``, ``reduction``, ``shape``,
            ``source`` or ``opaque``: the symbolic printer merges elementwise chains and the
            diff treats ``shape`` ops as harmless.
        onnx: the ONNX operator this op corresponds to, if any.
        params: names of the inputs that are usually parameters (weights), for naming.
        commutative: whether the order of the two inputs means nothing (add, mul, ...).
        doc: one line for people.
    """

    name: str
    inputs: tuple[str, ...]
    attrs: Mapping[str, Attr]
    reference: Callable[..., Any]
    equation: Callable[..., Any] | None = None
    category: str = "elementwise"
    onnx: str | None = None
    params: tuple[str, ...] = ()
    doc: str = ""
    outputs: int = 1
    commutative: bool = False

    def normalize_attrs(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        """Check ``attrs`` against the schema and fill in defaults (sorted by name).

        Results are memoized per op and attribute values (models repeat the same layers).
        """
        try:
            key = (self.name, tuple(sorted((k, type(v).__name__, v)
                                           for k, v in (attrs or {}).items())))
            hit = _NORMALIZED.get(key)
        except TypeError:  # an unhashable value: check it the long way
            key, hit = None, None
        if hit is not None:
            return dict(hit)
        out = self._normalize(attrs)
        if key is not None and len(_NORMALIZED) < 65536:
            _NORMALIZED[key] = out
        return dict(out)

    def _normalize(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        attrs = dict(attrs or {})
        if self.name == OPAQUE:
            if not isinstance(attrs.get("target"), str):
                raise GraphError("an opaque node needs a 'target' attribute naming the native op")
            return dict(sorted(attrs.items()))
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise GraphError(
                f"op {self.name!r} has no attribute {unknown[0]!r}; "
                f"known: {sorted(self.attrs) or 'none'}"
            )
        out: dict[str, Any] = {}
        for name in sorted(self.attrs):
            spec = self.attrs[name]
            if name in attrs:
                out[name] = spec.check(self.name, name, attrs[name])
            elif spec.default is REQUIRED:
                raise GraphError(f"op {self.name!r} needs attribute {name!r}")
            else:
                out[name] = spec.default
        return out

    def input_names(self, attrs: Mapping[str, Any], count: int) -> tuple[str, ...]:
        """The names of the inputs present for these attributes (raises on wrong count)."""
        names: list[str] = []
        for entry in self.inputs:
            if entry.startswith("*"):
                names.extend(f"{entry[1:]}{i}" for i in range(count - len(names)))
                return tuple(names)
            base, _, flag = entry.partition("?")
            if not flag or attrs.get(flag):
                names.append(base)
        if len(names) != count:
            raise GraphError(
                f"op {self.name!r} with these attributes takes {len(names)} inputs "
                f"({', '.join(names)}), got {count}"
            )
        return tuple(names)


_REGISTRY: dict[str, OpSpec] = {}
_NORMALIZED: dict[tuple[str, tuple[tuple[str, str, Any], ...]], dict[str, Any]] = {}


def register(spec: OpSpec) -> OpSpec:
    """Add ``spec`` to the registry (each name once)."""
    if spec.name in _REGISTRY:
        raise ValueError(f"op {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def op(
    name: str,
    inputs: Iterable[str] = ("x",),
    *,
    attrs: Mapping[str, Attr] | None = None,
    equation: Callable[..., Any] | None = None,
    category: str = "elementwise",
    onnx: str | None = None,
    params: Iterable[str] = (),
    outputs: int = 1,
    commutative: bool = False,
    doc: str = "",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the decorated NumPy function as the reference of op ``name``."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        register(
            OpSpec(
                name=name,
                inputs=tuple(inputs),
                attrs=dict(attrs or {}),
                reference=fn,
                equation=equation,
                category=category,
                onnx=onnx,
                params=tuple(params),
                outputs=outputs,
                commutative=commutative,
                doc=doc or _first_line(fn.__doc__),
            )
        )
        return fn

    return wrap


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def get_spec(name: str) -> OpSpec:
    """The spec of op ``name``; raises GraphError naming the op if it is unknown."""
    _load_builtin_ops()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise GraphError(f"unknown canonical op {name!r}; register it in specgraph.ops") from None


def is_registered(name: str) -> bool:
    _load_builtin_ops()
    return name in _REGISTRY


def registered_ops() -> dict[str, OpSpec]:
    """All registered ops, by name (sorted)."""
    _load_builtin_ops()
    return dict(sorted(_REGISTRY.items()))


_LOADED = False


def _load_builtin_ops() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from specgraph.ops import (  # noqa: F401  (registration happens on import)
        activations,
        elementwise,
        layers,
        opaque,
        reductions,
        tensor,
    )
