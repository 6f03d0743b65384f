"""The ops a spec statement may name, and what the spec adds to each canonical op.

Every canonical op of ``specgraph.ops`` is a spec op under its own name and with its own
attributes (``layer_norm`` with ``eps``, ``conv`` with ``stride`` and ``padding``), so a
statement compiles to the canonical node directly. A ``Rule`` adds, per op, what a spec needs
that a traced graph does not: the sizes that give parameters their shapes (``out`` of a
``linear``, ``kernel`` and ``out`` of a ``conv``), one number written for every spatial axis
(``stride: 2``), and stand-ins for required attributes a spec may leave out (a ``softmax``
over the last axis, the attention scale 1/sqrt(head size)); an attribute filled by a stand-in
or a default is recorded as not stated. ``rearrange`` (einops) is the one op of the spec's
own: it compiles to reshape and transpose nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specgraph.ops import OPAQUE, registered_ops

__all__ = ["Rule", "RULES", "SPEC_OPS", "ACTIVATIONS", "STAND_IN_ACTIVATION", "REARRANGE",
           "STATEMENT_FIELDS", "BLOCK_FIELDS", "attributes"]

Shape = tuple[int, ...]
REARRANGE = "rearrange"
STAND_IN_ACTIVATION = "relu"  # what `activation: unspecified` runs as

STATEMENT_FIELDS = ("name", "params", "activation", "equation", "tolerance", "param_count",
                    "unspecified")
BLOCK_FIELDS = ("name", "layers", "repeat", "index", "in", "out", "unspecified", "tolerance",
                "param_count")


@dataclass(frozen=True)
class Rule:
    """What a spec adds to one canonical op.

    Attributes:
        extras: spec-only attributes (name -> kind) that size the parameters.
        params: the parameters' shapes by role, from the input shapes and the attributes.
        from_params: the extras, read back from parameter shapes the spec states.
        stand_ins: values for required attributes the statement leaves out.
        spatial: ``ints`` attributes written as one number for every spatial axis, and how
            many entries each spatial axis takes (padding: 2, begin and end).
        derived: attributes set by the statement's structure, never written.
    """

    extras: Mapping[str, str] = field(default_factory=dict)
    params: Callable[[Sequence[Shape], Mapping[str, Any]], dict[str, Shape]] | None = None
    from_params: Callable[[Mapping[str, Shape], Mapping[str, Any]], dict[str, Any]] | None = None
    stand_ins: Callable[[Sequence[Shape], Mapping[str, Any]], dict[str, Any]] | None = None
    spatial: Mapping[str, int] = field(default_factory=dict)
    derived: Callable[[int], dict[str, Any]] | None = None


def _optional(attrs: Mapping[str, Any], **shapes: Shape) -> dict[str, Shape]:
    """Parameters whose flag (``scale`` for weight, ``bias`` for bias) is on."""
    flags = {"weight": "scale", "bias": "bias"}
    return {role: s for role, s in shapes.items() if attrs.get(flags.get(role, ""), True)}


def _linear(shapes: Sequence[Shape], a: Mapping[str, Any]) -> dict[str, Shape]:
    out = {"weight": (shapes[0][-1], a["out"])}
    return {**out, "bias": (a["out"],)} if a.get("bias", True) else out


def _conv(transpose: bool) -> Callable[[Sequence[Shape], Mapping[str, Any]], dict[str, Shape]]:
    def params(shapes: Sequence[Shape], a: Mapping[str, Any]) -> dict[str, Shape]:
        channels, groups = shapes[0][1], a.get("groups", 1)
        if transpose:
            weight = (channels, a["out"] // groups, *a["kernel"])
        else:
            weight = (a["out"], channels // groups, *a["kernel"])
        return {"weight": weight, **({"bias": (a["out"],)} if a.get("bias", True) else {})}

    return params


def _conv_back(transpose: bool) -> Callable[[Mapping[str, Shape], Mapping[str, Any]],
                                            dict[str, Any]]:
    def back(stated: Mapping[str, Shape], a: Mapping[str, Any]) -> dict[str, Any]:
        w = stated.get("weight")
        if w is None or len(w) < 3:
            return {}
        out = w[1] * a.get("groups", 1) if transpose else w[0]
        return {"out": out, "kernel": tuple(w[2:])}

    return back


def _norm_axis(shapes: Sequence[Shape], a: Mapping[str, Any]) -> dict[str, Any]:
    return {"axis": len(shapes[0]) - 1}


def _last_axis(shapes: Sequence[Shape], a: Mapping[str, Any]) -> dict[str, Any]:
    return {"axis": max(len(shapes[0]) - 1, 0)}


def _conv_stand_ins(shapes: Sequence[Shape], a: Mapping[str, Any]) -> dict[str, Any]:
    rank = max(len(shapes[0]) - 2, 0)
    return {"stride": (1,) * rank, "padding": (0,) * (2 * rank), "dilation": (1,) * rank,
            "output_padding": (0,) * rank}


def _pool_stand_ins(shapes: Sequence[Shape], a: Mapping[str, Any]) -> dict[str, Any]:
    rank = max(len(shapes[0]) - 2, 0)
    return {"stride": tuple(a.get("kernel", (1,) * rank)), "padding": (0,) * (2 * rank),
            "dilation": (1,) * rank}


def _channels(shapes: Sequence[Shape]) -> Shape:
    return (shapes[0][1],) if len(shapes[0]) > 1 else (shapes[0][0],)


_CONV_SPATIAL = {"stride": 1, "padding": 2, "dilation": 1, "kernel": 1, "output_padding": 1}
_POOL_SPATIAL = {"stride": 1, "padding": 2, "dilation": 1, "kernel": 1}

RULES: dict[str, Rule] = {
    "linear": Rule(extras={"out": "int"}, params=_linear,
                   from_params=lambda s, a: {"out": s["weight"][-1]} if "weight" in s else {}),
    "conv": Rule(extras={"out": "int", "kernel": "ints"}, params=_conv(False),
                 from_params=_conv_back(False), stand_ins=_conv_stand_ins,
                 spatial=_CONV_SPATIAL),
    "conv_transpose": Rule(extras={"out": "int", "kernel": "ints"}, params=_conv(True),
                           from_params=_conv_back(True), stand_ins=_conv_stand_ins,
                           spatial=_CONV_SPATIAL),
    "max_pool": Rule(stand_ins=_pool_stand_ins, spatial=_POOL_SPATIAL),
    "avg_pool": Rule(stand_ins=_pool_stand_ins, spatial=_POOL_SPATIAL),
    "batch_norm": Rule(params=lambda s, a: _optional(
        a, mean=_channels(s), var=_channels(s), weight=_channels(s), bias=_channels(s))),
    "layer_norm": Rule(stand_ins=_norm_axis, params=lambda s, a: _optional(
        a, weight=s[0][a["axis"]:], bias=s[0][a["axis"]:])),
    "group_norm": Rule(params=lambda s, a: _optional(a, weight=_channels(s),
                                                     bias=_channels(s))),
    "rms_norm": Rule(stand_ins=lambda s, a: {**_norm_axis(s, a), "eps": 1e-6},
                     params=lambda s, a: _optional(a, weight=s[0][a["axis"]:])),
    "embedding": Rule(extras={"num": "int", "dim": "int"},
                      params=lambda s, a: {"weight": (a["num"], a["dim"])},
                      from_params=lambda s, a: dict(zip(("num", "dim"), s["weight"]))
                      if len(s.get("weight", ())) == 2 else {}),
    "resize": Rule(stand_ins=lambda s, a: {"steps": tuple(
        s[0][axis] / n for axis, n in zip(a.get("axes", ()), a.get("sizes", ())))}),
    "softmax": Rule(stand_ins=_last_axis),
    "log_softmax": Rule(stand_ins=_last_axis),
    "attention": Rule(stand_ins=lambda s, a: {"scale": 1.0 / math.sqrt(s[0][-1])},
                      derived=lambda n: {"has_mask": n == 4}),
}

# canonical ops a statement cannot name: a native op no rule knows, and a weight
# reparametrization that is no layer of its own
_EXCLUDED = frozenset({OPAQUE, "weight_norm"})


def _spec_ops() -> tuple[str, ...]:
    return tuple(sorted([*(n for n in registered_ops() if n not in _EXCLUDED), REARRANGE]))


SPEC_OPS: tuple[str, ...] = _spec_ops()
ACTIVATIONS: tuple[str, ...] = tuple(sorted(
    n for n, s in registered_ops().items() if s.category == "activation" and n != "dropout"))


def attributes(op: str) -> dict[str, tuple[str, tuple[str, ...], bool]]:
    """The attributes a statement of ``op`` may write: name -> (kind, choices, optional)."""
    if op == REARRANGE:
        return {"pattern": ("str", (), False), "sizes": ("sizes", (), False)}
    spec = registered_ops()[op]
    rule = RULES.get(op, Rule())
    derived = set(rule.derived(0)) if rule.derived else set()
    out = {name: (a.kind, a.choices, a.optional) for name, a in spec.attrs.items()
           if name not in derived}
    out.update((name, (kind, (), False)) for name, kind in rule.extras.items())
    return dict(sorted(out.items()))
