"""JSON renderer: the public report types as deterministic JSON."""

from __future__ import annotations

import json
import math
from typing import Any

from specgraph.renderers.base import Renderer
from specgraph.report import DiffReport, SpecReport
from specgraph.summary import LayerRow, ModelSummary, TensorInfo

__all__ = ["JsonRenderer"]


def _tensor(t: TensorInfo) -> dict[str, Any]:
    return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float written as the string ``"inf"``, ``"-inf"`` or
    ``"nan"`` (an attribute such as ``clamp(max=inf)``, an unbounded error): JSON has no such
    numbers, and a reader tells the strings apart from every finite number."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _layer(r: LayerRow) -> dict[str, Any]:
    return {
        "index": r.index, "scope": r.scope, "op": r.op,
        "attrs": {k: _plain(v) for k, v in r.attrs.items()},
        "inputs": [list(s) for s in r.inputs], "outputs": [list(s) for s in r.outputs],
        "params": [_tensor(p) for p in r.params], "param_count": r.param_count,
        "source": r.source, "origin": r.origin,
    }


class JsonRenderer(Renderer):
    """``json.dumps`` of plain dicts: same inputs, byte-identical output."""

    format = "json"

    def _render_ModelSummary(self, s: ModelSummary) -> str:
        data = {
            "reference": s.reference,
            "framework": s.framework,
            "inputs": [_tensor(t) for t in s.inputs],
            "outputs": [_tensor(t) for t in s.outputs],
            "param_count": s.param_count,
            "layers": [_layer(r) for r in s.layers],
            "equations": [{"scope": e.scope, "lhs": e.lhs, "text": e.text, "latex": e.latex,
                           "nodes": list(e.nodes)} for e in s.equations],
        }
        return json.dumps(_finite(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def _render_DiffReport(self, r: DiffReport) -> str:
        return json.dumps(_finite(r.to_dict()), indent=2, ensure_ascii=False,
                          allow_nan=False) + "\n"

    def _render_SpecReport(self, r: SpecReport) -> str:
        return json.dumps(_finite(r.to_dict()), indent=2, ensure_ascii=False,
                          allow_nan=False) + "\n"
