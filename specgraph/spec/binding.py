"""A spec's dims bound to another model's input sizes, so that a spec written with example
sizes (``B: 2, T: 8``) checks a model whose example inputs have others.

Each spec input is paired with the model's input in the same position; an axis written as a
bare dim (``B``) takes the model's size there, any other axis (``d_model``, ``2*T``) is
evaluated once the dims are bound and must agree, or it is a conflict: the model's input
differs from what the spec states.

Example:
    >>> spec = load("examples/specs/bert_layer.spec.yaml")  # doctest: +SKIP
    >>> bind(spec, [(4, 16, 32)]).dims  # doctest: +SKIP
    {'B': 4, 'T': 16}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specgraph.spec.compiled import CompiledSpec
from specgraph.spec.expr import ExprError, evaluate

__all__ = ["Binding", "Conflict", "bind"]


@dataclass(frozen=True)
class Conflict:
    """An input axis whose size the spec states otherwise than the model has it.

    Attributes:
        input: the spec's input name; axis: the axis (None: the ranks differ).
        written: the axis as the spec writes it (``d_model``), or the whole shape.
        stated: the size the spec gives it (its rank, when the ranks differ); got: the
            model's.
    """

    input: str
    axis: int | None
    written: str
    stated: int
    got: int

    def describe(self) -> str:
        """The conflict in words."""
        if self.axis is None:
            return (f"the spec's input {self.input} has {self.stated} axes ({self.written}) "
                    f"but the model's has {self.got}")
        return (f"axis {self.axis} of input {self.input} is {self.written} = {self.stated} in "
                f"the spec but {self.got} in the model")


@dataclass(frozen=True)
class Binding:
    """The dims' sizes taken from the model's inputs, and the axes that disagree."""

    dims: dict[str, int] = field(default_factory=dict)
    conflicts: tuple[Conflict, ...] = ()


def bind(spec: CompiledSpec, shapes: Sequence[tuple[int, ...]]) -> Binding:
    """Bind ``spec``'s dims to the sizes of a model's inputs (``shapes``, in order).

    A dim met twice takes its first size; a later axis that gives it another is a
    conflict. Inputs beyond the shorter of the two lists are left alone (the caller
    compares the counts).
    """
    dims: dict[str, int] = {}
    pending: list[tuple[str, int, str, int]] = []
    conflicts: list[Conflict] = []
    for (name, written), got in zip(spec.input_shapes.items(), shapes):
        if len(written) != len(got):
            conflicts.append(Conflict(name, None, " ".join(written), len(written), len(got)))
            continue
        for axis, (text, size) in enumerate(zip(written, got)):
            if text in spec.dims and text not in dims:
                dims[text] = int(size)
            else:
                pending.append((name, axis, text, int(size)))
    sizes = {**spec.sizes, **dims}
    for name, axis, text, size in pending:
        try:
            stated = evaluate(text, sizes)
        except ExprError:  # an expression over hyperparameters that depend on dims
            continue
        if stated != size:
            conflicts.append(Conflict(name, axis, text, int(stated), size))
    return Binding(dims, tuple(conflicts))
