"""Paper specs: a model as a paper states it, in YAML, compiled to the shared Graph.

``load`` reads a spec file (``yaml.safe_load`` semantics, every position kept, size, nesting
and alias expansion bounded: ``reader``), checks it against the JSON Schema of the language
(``schema``, shipped as ``spec.schema.json``), then compiles it (``compiler``): names
resolved, repeat blocks unrolled, shapes inferred from the canonical ops, parameters sized.
The result is a ``CompiledSpec``: the Graph, and the side table of what the spec leaves open
(``CompiledSpec.unchecked``). Every failure is a ``SpecError`` whose message starts
``file:line:col:``. Nothing here imports a deep-learning framework.

Example:
    >>> spec = load("examples/specs/xor.spec.yaml")  # doctest: +SKIP
    >>> [n.op for n in spec.graph.nodes]  # doctest: +SKIP
    ['linear', 'relu', 'linear', 'split', 'reshape', 'reshape']
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specgraph.errors import SpecError
from specgraph.spec.compiled import (CompiledSpec, Count, Fill, Implementation, Statement,
                                     Tolerance, Unchecked)
from specgraph.spec.compiler import compile_document
from specgraph.spec.reader import MAX_BYTES, read
from specgraph.spec.schema import validate

__all__ = ["load", "loads", "CompiledSpec", "Unchecked", "Statement", "Tolerance", "Count",
           "Fill", "Implementation", "SpecError"]


def load(path: str | Path, *, name: str | None = None, source: str | None = None,
         dims: Mapping[str, int] | None = None,
         fills: Mapping[tuple[str, str], Fill] | None = None) -> CompiledSpec:
    """Read, validate and compile the spec file at ``path``.

    Args:
        path: the YAML file.
        name: the file as error messages name it (default: ``path`` as given).
        source: the file as nodes' ``source`` names it (default: ``name``).
        dims: sizes for its dims instead of the example sizes it gives.
        fills: what to run where the spec leaves something open (see
            ``compiler.compile_document``).

    Raises:
        SpecError: the file cannot be read, or the spec is malformed (``file:line:col:``).
    """
    name = name or str(path)
    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_BYTES + 1)
    except OSError as err:
        raise SpecError(name, 1, 1, f"the file cannot be read ({err.strerror}); check the "
                        "path and its permissions") from None
    return loads(raw, name=name, source=source, dims=dims, fills=fills)


def loads(text: str | bytes, *, name: str = "<spec>", source: str | None = None,
          dims: Mapping[str, int] | None = None,
          fills: Mapping[tuple[str, str], Fill] | None = None) -> CompiledSpec:
    """Validate and compile a spec given as text (see ``load``)."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return compile_document(_validated(raw, name), source or name, dims=dims, fills=fills)


@functools.lru_cache(maxsize=8)
def _validated(raw: bytes, name: str) -> Any:
    """The document of ``raw``, read and validated once: a check compiles one spec up to
    three times (its example sizes, the implementation's, what it leaves open filled in)."""
    doc = read(raw, name)
    validate(doc)
    return doc
