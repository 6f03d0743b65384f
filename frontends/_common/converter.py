"""The converter state every frontend's tracer builds on: the graph being built, where the
current native node sits, and parameters stored in the layouts their readers ask for."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from specgraph.ir import Graph, GraphBuilder, Value
from specgraph.ops import OPAQUE

__all__ = ["BaseConverter", "Step", "Meta", "LayoutRule", "NATIVE", "no_steps",
           "swap_last_two", "layout_shape", "inverse_steps", "inverse_perm", "lay_out"]

Step = tuple[str, tuple[int, ...]]
"""One step from a native array towards a stored one: ``("transpose", perm)`` or
``("reshape", shape)`` (the steps of ``TracedModel.param_layouts``)."""
Meta = tuple[tuple[int, ...], str]  # (shape, dtype) of one output
LayoutRule = Callable[[tuple[int, ...]], tuple[Step, ...]]  # native shape -> its steps

NATIVE = "native"


def no_steps(shape: tuple[int, ...]) -> tuple[Step, ...]:
    """The native layout: the array as the framework keeps it."""
    return ()


def swap_last_two(shape: tuple[int, ...]) -> tuple[Step, ...]:
    """The layout of a linear weight ``[..., out, in]`` stored ``[..., in, out]``."""
    rank = len(shape)
    return (("transpose", tuple(range(rank - 2)) + (rank - 1, rank - 2)),)


def inverse_perm(perm: Sequence[int]) -> tuple[int, ...]:
    """The permutation that undoes ``perm``."""
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _step_shape(shape: tuple[int, ...], step: Step) -> tuple[int, ...]:
    kind, arg = step
    return tuple(shape[p] for p in arg) if kind == "transpose" else tuple(arg)


def layout_shape(shape: tuple[int, ...], steps: Sequence[Step]) -> tuple[int, ...]:
    """The shape an array of ``shape`` has after ``steps``."""
    for step in steps:
        shape = _step_shape(shape, step)
    return shape


def inverse_steps(shape: tuple[int, ...], steps: Sequence[Step]) -> tuple[Step, ...]:
    """The steps that take an array laid out by ``steps`` (from ``shape``) back to ``shape``.

    >>> depthwise = (("transpose", (2, 3, 0, 1)), ("reshape", (8, 1, 3, 3)))  # [3,3,4,2]
    >>> inverse_steps((3, 3, 4, 2), depthwise)
    (('reshape', (4, 2, 3, 3)), ('transpose', (2, 3, 0, 1)))
    """
    back: list[Step] = []
    for kind, arg in steps:
        back.append(("transpose", inverse_perm(arg)) if kind == "transpose" else
                    ("reshape", shape))
        shape = _step_shape(shape, (kind, arg))
    return tuple(reversed(back))


def lay_out(array: np.ndarray, steps: Sequence[Step]) -> np.ndarray:
    """``array`` after ``steps`` with NumPy: the array itself without steps, else a copy."""
    if not steps:
        return array
    for kind, arg in steps:
        array = np.transpose(array, arg) if kind == "transpose" else np.reshape(array, arg)
    return array.copy()


@dataclass
class _Stored:
    """A graph parameter: its name, the native array's shape, the layout it is stored in."""

    name: str
    shape: tuple[int, ...]
    layout: Hashable
    steps: tuple[Step, ...]
    value: Value


class BaseConverter:
    """What the converter of every frontend shares (a subclass per frontend walks its
    native program and calls the converters of its op tables with itself as ``cx``).

    It holds the ``GraphBuilder`` (``b``), says where the current native node sits
    (``where``: scope, source, origin), adds nodes for it (``emit``, ``emit_multi``,
    ``emit_opaque``, ``emit_opaque_output``), and keeps the parameters: ``param(key,
    layout)`` creates a parameter on first use, stored in the layout that first reader asks
    for; a later reader that wants another layout gets it through transposes and reshapes
    added once (``relayout``); ``weights`` converts the native arrays into the stored layouts.

    A layout is a name the frontend gives to a way of laying out a native array
    (``LAYOUTS``: name -> the steps for a native shape), ``NATIVE`` being the array as the
    framework keeps it. A subclass says how to read its current node (``locate``, ``out``,
    ``outs``) and its parameters (``param_spec``, ``native_array``).
    """

    LAYOUTS: ClassVar[Mapping[Hashable, LayoutRule]] = {NATIVE: no_steps}
    NATIVE: ClassVar[Hashable] = NATIVE

    def __init__(self, reference: str) -> None:
        self.reference = reference
        self.b = GraphBuilder(reference)
        self._where: dict[str, str] | None = None
        self._params: dict[Hashable, _Stored] = {}
        self._relayouts: dict[tuple[Hashable, Hashable], Value] = {}

    # --- what a frontend says about its native program --------------------------------
    def locate(self) -> dict[str, str]:
        """``scope``, ``source`` and ``origin`` of the current native node."""
        raise NotImplementedError

    def out(self, index: int = 0) -> Meta:
        """Shape and dtype of output ``index`` of the current native node."""
        raise NotImplementedError

    def outs(self) -> list[Meta]:
        """Shape and dtype of every output of the current native node."""
        raise NotImplementedError

    def param_spec(self, key: Hashable) -> tuple[str, tuple[int, ...], str]:
        """Name, native shape and dtype of the parameter ``key``."""
        raise NotImplementedError

    def native_array(self, key: Hashable) -> np.ndarray:
        """The parameter ``key`` as a NumPy array in its native layout."""
        raise NotImplementedError

    def layout_steps(self, layout: Hashable, shape: tuple[int, ...]) -> tuple[Step, ...]:
        """The steps that lay out a native array of ``shape`` in ``layout``."""
        return self.LAYOUTS[layout](shape)

    # --- where the current node sits, and nodes for it ---------------------------------
    def where(self) -> dict[str, str]:
        """``scope``, ``source`` and ``origin`` of the current node, for ``GraphBuilder``
        (computed once per node: a frontend sets ``_where`` to None when it moves on)."""
        if self._where is None:
            self._where = self.locate()
        return self._where

    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, *,
             out: Meta | None = None) -> Value:
        """Add one IR node for the current native node (shape and dtype of its first
        output unless ``out`` gives them)."""
        shape, dtype = out if out is not None else self.out(0)
        return self.b.add(op, list(inputs), attrs, shape=shape, dtype=dtype, **self.where())

    def emit_multi(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any],
                   outs: Sequence[Meta] | None = None) -> tuple[Value, ...]:
        """Add one IR node with several outputs (those of the current node unless given)."""
        metas = self.outs() if outs is None else list(outs)
        return self.b.add_multi(op, list(inputs), attrs, outputs=metas, **self.where())

    def emit_opaque(self, inputs: Sequence[Value], outs: Sequence[Meta] | None = None,
                    target: str | None = None) -> tuple[Value, ...]:
        """The current node as an ``opaque`` node that keeps its native op (``target``,
        the node's origin unless given)."""
        target = target or self.where()["origin"]
        metas = self.outs() if outs is None else list(outs)
        return self.b.add_multi(OPAQUE, list(inputs), {"target": target}, outputs=metas,
                                **self.where())

    def emit_opaque_output(self, x: Value, index: int) -> Value:
        """Output ``index`` of the current node, which no canonical op computes (pooling
        indices, norm statistics), as an ``opaque`` node of its own reading ``x``."""
        shape, dtype = self.out(index)
        target = f"{self.where()['origin']}[{index}]"
        return self.b.add(OPAQUE, [x], {"target": target}, shape=shape, dtype=dtype,
                          **self.where())

    def native_layouts(self) -> tuple[dict[str, tuple[Step, ...]], dict[str, tuple[int, ...]]]:
        """Each graph parameter's steps from its native array (those with any) and its
        native shape: ``TracedModel.param_layouts`` and ``param_shapes``."""
        stored = list(self._params.values())
        return ({s.name: s.steps for s in stored if s.steps},
                {s.name: tuple(s.shape) for s in stored})

    # --- parameters in layouts -----------------------------------------------------------
    def param(self, key: Hashable, layout: Hashable) -> Value:
        """The parameter ``key`` in ``layout``: created on first use, stored in the layout
        that first reader asks for; in any other layout through ``relayout_steps``."""
        stored = self._params.get(key)
        if stored is None:
            name, shape, dtype = self.param_spec(key)
            steps = self.layout_steps(layout, shape)
            value = self.b.param(name, layout_shape(shape, steps), dtype)
            stored = self._params[key] = _Stored(name, shape, layout, steps, value)
        return self._relayout(stored.value, key, stored.shape, stored.layout, layout)

    def relayout(self, value: Value, layout: Hashable, key: Hashable) -> Value:
        """``value``, a tensor in native layout, in ``layout`` (added once per ``key``)."""
        return self._relayout(value, key, value.shape, self.NATIVE, layout)

    def relayout_steps(self, shape: tuple[int, ...], have: Hashable, want: Hashable
                       ) -> tuple[Step, ...]:
        """The steps from layout ``have`` to layout ``want`` of a native array of ``shape``:
        back to the native layout, then on to ``want``."""
        if have == want:
            return ()
        undo = inverse_steps(shape, self.layout_steps(have, shape))
        return undo + self.layout_steps(want, shape)

    def _relayout(self, value: Value, key: Hashable, shape: tuple[int, ...], have: Hashable,
                  want: Hashable) -> Value:
        steps = self.relayout_steps(shape, have, want)
        if not steps:
            return value
        memo = (key, want)
        if memo not in self._relayouts:
            self._relayouts[memo] = self.emit_steps(value, steps)
        return self._relayouts[memo]

    def emit_steps(self, value: Value, steps: Sequence[Step]) -> Value:
        """``value`` after ``steps``, one transpose or reshape node each."""
        for kind, arg in steps:
            shape = _step_shape(value.shape, (kind, arg))
            attrs = {"perm": arg} if kind == "transpose" else {"shape": arg}
            value = self.emit(kind, [value], attrs, out=(shape, value.dtype))
        return value

    def weights(self, graph: Graph | None = None) -> dict[str, np.ndarray]:
        """The parameters' arrays by name, in the layouts they are stored in (only those
        ``graph`` keeps, if given), in the order the parameters were created."""
        return {stored.name: self.weight_array(key, stored.steps)
                for key, stored in self._params.items()
                if graph is None or stored.name in graph.params}

    def weight_array(self, key: Hashable, steps: tuple[Step, ...]) -> np.ndarray:
        """The parameter ``key``'s array laid out by ``steps``."""
        return lay_out(self.native_array(key), steps)
