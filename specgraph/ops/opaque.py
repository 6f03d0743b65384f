"""The ``opaque`` op: a native op no rule knows, kept with its origin so nothing crashes."""

from __future__ import annotations

from specgraph.errors import ExecutionError
from specgraph.ops._sym import call
from specgraph.ops.registry import OPAQUE, op


def _opaque_eq(*args, target="?", **_):
    return call(f"opaque[{target}]", *args)


@op(OPAQUE, ("*xs",), equation=_opaque_eq, category="opaque", outputs=-1)
def opaque(*xs, target="?", **_):
    """A native op with no canonical rule; its ``target`` attribute names the native op."""
    raise ExecutionError(
        f"the reference interpreter cannot run opaque op {target!r}: specgraph has no "
        "canonical op for it yet (a gap in specgraph, not in the model); compare the "
        "structure alone (--no-numeric), or register a canonical op for it "
        "(specgraph.ops.register)"
    )
