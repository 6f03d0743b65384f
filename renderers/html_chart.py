"""The HTML report's per-layer error chart: an inline SVG on a log scale, each layer's error
forward (circles) and backward (triangles) in colour-blind-safe colours, each layer's
tolerance as a dashed step, an "exact" band for errors of zero, layer names along the x axis.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

__all__ = ["error_chart", "fmt_number"]

_LEFT, _TOP, _HEIGHT, _RIGHT = 64, 14, 220, 16
_EXACT = 16  # the band below the lowest decade where errors of zero are drawn
_LABELS = 120  # room under the axis for the layer names
_KEYS = (("fw", "tf", "bad_f", "forward"), ("bw", "tb", "bad_b", "backward"))


def _e(text: Any) -> str:
    return escape(str(text), quote=True)


def fmt_number(value: Any) -> str:
    """A number as the report prints it: 3 significant digits, e-notation below 1e-3 and
    from 1e3 on (the page's script formats the same way).

    Example:
        >>> [fmt_number(v) for v in (0, 0.5, 0.012345, 123.4, 2.5e-7, 12345.0, "nan")]
        ['0', '0.5', '0.0123', '123', '2.5e-7', '1.23e4', 'nan']
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    rounded = float(f"{value:.3g}")
    if 1e-3 <= abs(rounded) < 1e3:
        return f"{rounded:.3g}"
    mantissa, _, exp = f"{rounded:.2e}".partition("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exp)}"


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class _Scale:
    """log10 over the decades the values span; zero below them, in the exact band."""

    def __init__(self, layers: list[dict[str, Any]]) -> None:
        values = [v for row in layers for k in ("fw", "bw", "tf", "tb")
                  if _finite(v := row.get(k)) and v > 0]
        lo = math.floor(math.log10(min(values))) if values else -8
        hi = math.ceil(math.log10(max(values))) if values else 0
        self.lo, self.hi = min(lo, hi - 1), max(hi, lo + 1)

    def y(self, v: Any) -> float:
        if not _finite(v) or v > 10.0 ** self.hi:  # inf, nan, off the top: on the top
            return _TOP
        if v <= 0:
            return _TOP + _HEIGHT + _EXACT * 0.6
        v = max(v, 10.0 ** self.lo)
        return _TOP + _HEIGHT * (self.hi - math.log10(v)) / (self.hi - self.lo)


def _marker(kind: str, cx: float, cy: float, cls: str, attrs: str, title: str) -> str:
    if kind == "fw":
        shape = f'<circle class="{cls}" cx="{cx:.1f}" cy="{cy:.1f}" r="3.6"{attrs}>'
        end = "</circle>"
    else:
        pts = f"{cx:.1f},{cy - 4.4:.1f} {cx + 4.2:.1f},{cy + 3.2:.1f} {cx - 4.2:.1f},{cy + 3.2:.1f}"
        shape = f'<polygon class="{cls}" points="{pts}"{attrs}>'
        end = "</polygon>"
    return f"{shape}<title>{title}</title>{end}"


def _points(layers: list[dict[str, Any]], scale: _Scale, step: float) -> list[str]:
    out = []
    for i, row in enumerate(layers):
        cx = _LEFT + step * (i + 0.5)
        for key, tol, bad, direction in _KEYS:
            if key not in row:
                continue
            v, limit = row[key], row[tol]
            over = _finite(v) and _finite(limit) and v > limit
            if not _finite(v):
                over = True
            flag = " bad" if row.get(bad) else (" over" if over else "")
            flag += " exact" if v == 0 else ""
            said = ("diverges" if row.get(bad) else
                    "above its tolerance, every element within its own bound" if over else
                    "exact" if v == 0 else "within tolerance")
            title = (f"{_e(row['name'])}: {direction} error {_e(fmt_number(v))}, "
                     f"tolerance {_e(fmt_number(limit))}: {said}")
            attrs = f' data-l="{_e(row["l"])}" data-r="{_e(row["r"])}"'
            out.append(_marker(key, cx, scale.y(v), f"pt {key}{flag}", attrs, title))
    return out


def _x_labels(layers: list[dict[str, Any]], step: float) -> list[str]:
    every = max(1, math.ceil(13 / step))
    base = _TOP + _HEIGHT + _EXACT + 8
    out = []
    for i in range(0, len(layers), every):
        x = _LEFT + step * (i + 0.5)
        name = str(layers[i]["name"])
        short = name if len(name) <= 22 else "…" + name[-21:]
        out.append(f'<text class="xl" x="{x:.1f}" y="{base}" text-anchor="end" '
                   f'transform="rotate(-60 {x:.1f} {base})">{_e(short)}<title>{_e(name)}'
                   "</title></text>")
    return out


def _axes(scale: _Scale, width: float) -> list[str]:
    out = []
    for e in range(scale.lo, scale.hi + 1):
        yy = scale.y(10.0 ** e)
        out.append(f'<line class="grid" x1="{_LEFT}" x2="{width - _RIGHT:.0f}" y1="{yy:.1f}" '
                   f'y2="{yy:.1f}"/><text x="{_LEFT - 6}" y="{yy + 4:.1f}" '
                   f'text-anchor="end">1e{e}</text>')
    band = _TOP + _HEIGHT + 3
    out.append(f'<rect class="exact-band" x="{_LEFT}" y="{band}" width="{width - _RIGHT - _LEFT:.0f}" '
               f'height="{_EXACT - 4}"/><text x="{_LEFT - 6}" y="{band + 10}" '
               'text-anchor="end">exact</text>')
    out.append(f'<line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" '
               f'y2="{_TOP + _HEIGHT + _EXACT}"/>')
    return out


def _legend(page: Any) -> str:
    def icon(kind: str, cls: str) -> str:
        shape = ('<circle cx="7" cy="7" r="4"/>' if kind == "fw" else
                 '<polygon points="7,2 11.5,10.5 2.5,10.5"/>')
        return f'<svg class="key {cls}" width="14" height="14" aria-hidden="true">{shape}</svg>'

    dash = ('<svg class="key" width="22" height="14" aria-hidden="true"><line class="{}" '
            'x1="1" x2="21" y1="7" y2="7"/></svg>')
    items = [f"{icon('fw', 'fw')} forward error", f"{icon('bw', 'bw')} backward error",
             f"{dash.format('tol-f')} forward tolerance",
             f"{dash.format('tol-b')} backward tolerance",
             f"{icon('fw', 'fw bad')} diverges",
             f"{icon('fw', 'fw over')} above its tolerance (each element within its bound)",
             "exact: an error of zero, drawn in the band at the bottom"]
    return ('<div class="chart-legend">' + "".join(f"<span>{i}</span>" for i in items) +
            f"<span>errors relative to each tensor's scale, layers in the order of "
            f"{_e(page.sides[1]['name'])}; click a point to show it</span></div>")


def error_chart(page: Any) -> str:
    """The ``#numbers`` section, or nothing where no layer was compared."""
    layers = page.layers
    if not layers:
        return ""
    scale = _Scale(layers)
    step = max(6.0, min(40.0, 1100.0 / len(layers)))
    width = max(_LEFT + step * len(layers) + _RIGHT, 620)
    height = _TOP + _HEIGHT + _EXACT + _LABELS
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height}" '
           f'width="100%" height="{height}" preserveAspectRatio="xMinYMin meet" '
           f'data-width="{width:.0f}" role="img" id="error-chart">',
           "<title>per-layer error relative to each tensor's scale, forward and backward, "
           "log scale, with each layer's tolerance</title>", *_axes(scale, width)]
    for key, cls in (("tf", "tol-f"), ("tb", "tol-b")):
        pts = []
        for i, row in enumerate(layers):
            x0, x1 = _LEFT + step * i, _LEFT + step * (i + 1)
            yy = scale.y(row[key])
            pts.append(f"{x0:.1f},{yy:.1f} {x1:.1f},{yy:.1f}")
        svg.append(f'<polyline class="{cls}" points="{" ".join(pts)}"/>')
    svg += _points(layers, scale, step) + _x_labels(layers, step) + ["</svg>"]
    return (f'<section id="numbers"><h2>Numeric error per layer</h2>'
            f'<div class="chart">{"".join(svg)}{_legend(page)}</div></section>')
