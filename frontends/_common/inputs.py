"""The factory's example inputs as every tracer takes them: a tuple (one array alone is
wrapped), anything else one sentence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specgraph.errors import FactoryError

__all__ = ["example_tuple"]


def example_tuple(example_inputs: Any, reference: str, *, single: Callable[[Any], bool],
                  returns: str, kind: str = "array") -> tuple[Any, ...]:
    """``example_inputs`` as a tuple of inputs.

    Args:
        example_inputs: what the factory returned as example inputs.
        reference: the model reference, for messages.
        single: whether a value is one input on its own (an array or tensor).
        returns: what a factory of this kind returns, e.g. ``(module, example_inputs)``.
        kind: what one input is called in the message (``array``, ``tensor``).

    Raises:
        FactoryError: ``example_inputs`` is neither one input nor a tuple.
    """
    if single(example_inputs):
        return (example_inputs,)
    if not isinstance(example_inputs, tuple):
        example = returns.replace("example_inputs", "(x, ...)")
        raise FactoryError(
            f"{reference}: example_inputs must be a tuple of {kind}s (or one {kind}), got "
            f"{type(example_inputs).__name__}; return {example} from the factory"
        )
    return example_inputs
