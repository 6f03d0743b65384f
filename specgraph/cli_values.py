"""The values of the command line's options, parsed and bounded: ``--input-shape``,
``--seed``, ``--batch``, ``--repeat``, ``--rtol``/``--atol``. Each parser raises
``argparse.ArgumentTypeError`` with one sentence that says what to pass instead."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from specgraph.limits import MAX_RANK, MAX_TENSOR_BYTES

__all__ = ["MAX_SEEDS", "MAX_SEED", "MAX_BATCH", "InputShapes", "input_shape", "seeds",
           "tolerance", "batch", "repeat"]

MAX_SEEDS = 10_000  # each seed runs both models once, forward and backward
MAX_SEED = 2**32 - 1  # what every framework's generator takes
MAX_BATCH = 65_536  # examples per input; the inputs are repeated rows, the activations not


def input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=D1,D2,...``: an input's name and at most MAX_RANK sizes from 1, together at
    most MAX_TENSOR_BYTES elements (the bound holds in bytes once the dtype is known)."""
    name, sep, sizes = text.rpartition("=")
    parts = sizes.split(",")
    if not sep or not name or not all(_SIZE.fullmatch(p) and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is no NAME=D1,D2,...; pass an input's name and its sizes, whole "
            "numbers from 1, e.g. x=8,3,224,224")
    shape = tuple(int(p) for p in parts)
    if len(shape) > MAX_RANK:
        raise argparse.ArgumentTypeError(f"{text!r} gives {len(shape)} sizes; specgraph makes "
                                         f"inputs of at most {MAX_RANK} dimensions")
    if math.prod(shape) > MAX_TENSOR_BYTES:
        raise argparse.ArgumentTypeError(
            f"{text!r} makes {math.prod(shape):,} elements; an input specgraph makes holds at "
            f"most {MAX_TENSOR_BYTES:,} bytes")
    return name, shape


_SIZE = re.compile(r"[0-9]{1,12}")


class InputShapes(argparse.Action):
    """``--input-shape`` given any number of times: a dict by input name, each name once."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        try:
            name, shape = input_shape(values)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentError(self, str(err)) from None
        shapes = dict(getattr(namespace, self.dest) or {})
        if name in shapes:
            raise argparse.ArgumentError(self, f"{name!r} is given twice; pass each input's "
                                               "sizes once")
        shapes[name] = shape
        setattr(namespace, self.dest, shapes)


def seeds(text: str) -> tuple[int, ...]:
    """``3``, ``0-19`` or ``1,5,9``: at most MAX_SEEDS seeds, each from 0 to MAX_SEED."""
    try:
        parts = []
        for part in text.split(","):
            low, sep, high = part.partition("-")
            parts.append((int(low), int(high) if sep else int(low)))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no seed list; pass a number, a range like 0-19 or a list like 1,5,9"
        ) from None
    if not parts or min(min(p) for p in parts) < 0 or max(max(p) for p in parts) > MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text!r}: seeds are numbers from 0 to {MAX_SEED}")
    count = sum(max(0, high - low + 1) for low, high in parts)
    if count > MAX_SEEDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} names {count:,} seeds; at most {MAX_SEEDS:,} run in one call (each "
            "runs both models, forward and backward)")
    out = tuple(s for low, high in parts for s in range(low, high + 1))
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names no seed; a range goes from low to "
                                         "high, like 0-19")
    return out


def tolerance(text: str) -> float:
    """A finite number from 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is no number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a tolerance is a finite number from 0 (nan would pass every "
            "comparison, a negative one fail every one)")
    return value


def _whole(text: str, most: int, why: str) -> int:
    """A whole number from 1 to ``most``; ``why`` says, for ``{value}``, what the bound is."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is no whole number") from None
    if not 1 <= value <= most:
        raise argparse.ArgumentTypeError(why.format(value=value))
    return value


def batch(text: str) -> int:
    """A whole number from 1 to MAX_BATCH."""
    return _whole(text, MAX_BATCH, f"{{value:,}} examples: a batch holds from 1 to "
                  f"{MAX_BATCH:,} examples (the inputs and every activation grow with it)")


def repeat(text: str) -> int:
    """A whole number from 1 to 1,000."""
    return _whole(text, 1000, "{value:,}: --repeat runs every layer from 1 to 1,000 times")
