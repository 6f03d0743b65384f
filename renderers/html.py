"""The HTML report: one self-contained, offline page (CSS, scripts, SVG and MathML inline).

``HtmlRenderer().render(page)`` takes a ``specgraph.page.Page``. The page makes no network
request of any kind: a Content-Security-Policy allows only its own inline style and scripts
(by hash), nothing else. Every string from a model or a spec is escaped: in the markup by
``html.escape``, in the data the script reads by JSON with ``<``, ``>`` and ``&`` written as
``\\u`` escapes, and the script puts names on the page with ``textContent`` only. The same
inputs give the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
from html import escape
from importlib import resources
from typing import Any

from specgraph.assets import DAGRE, load
from specgraph.renderers.html_chart import error_chart
from specgraph.renderers.base import Renderer

__all__ = ["HtmlRenderer"]


def _asset(name: str) -> str:
    return resources.files("specgraph.renderers").joinpath("html_assets", name).read_text(
        encoding="utf-8")


def _e(text: Any) -> str:
    return escape(str(text), quote=True)


def _json(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


class HtmlRenderer(Renderer):
    format = "html"

    def _render_Page(self, page: Any) -> str:
        dagre, dagre_license = load(DAGRE)
        style, app = _asset("report.css"), _asset("report.js")
        dagre_script = f"/*! {DAGRE.name} {DAGRE.version}\n{dagre_license}*/\n{dagre}"
        csp = (f"default-src 'none'; script-src {_sha(dagre_script)} {_sha(app)}; "
               f"style-src {_sha(style)}; img-src data:; base-uri 'none'; form-action 'none'")
        ok = page.verdict["equivalent"]
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">',  # no data in it
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<meta name="generator" content="specgraph">',
            f"<title>specgraph: {_e(page.title)}</title>",
            f"<style>{style}</style></head><body>",
            "<header>",
            f"<h1>{_e(page.title)}</h1>",
            f'<span class="verdict {"ok" if ok else "bad"}" id="verdict">'
            f"{_e(page.verdict['text'])}</span>",
            self._meta(page),
            "</header><main>",
            self._top(page),
            self._equations(page),
            error_chart(page),
            self._spec(page),
            self._notes(page),
            "</main>",
            f'<script type="application/json" id="specgraph-data">{_json(page.data())}</script>',
            f"<script>{dagre_script}</script>",
            f"<script>{app}</script>",
            "</body></html>",
        ]
        return "\n".join(p for p in parts if p) + "\n"

    @staticmethod
    def _meta(page: Any) -> str:
        rows = []
        for s in page.sides:
            rows.append(f"<div>{_e(s['name'])}: <code>{_e(s['model'])}</code> "
                        f"({_e(s['framework'])}, {len(s['nodes'])} nodes)</div>")
        paper = (page.spec or {}).get("paper") or {}
        if paper:
            said = ", ".join(_e(paper[k]) for k in ("title", "section", "url") if paper.get(k))
            rows.append(f"<div>paper: {said}</div>")
        if page.numeric:
            n = page.numeric
            seeds = ", ".join(map(str, n["seeds"]))
            rows.append(f"<div>numbers: {_e(n['lhs_context'])} against "
                        f"{_e(n['rhs_context'])}, seeds {_e(seeds)}</div>")
        return f'<div class="meta">{"".join(rows)}</div>'

    def _top(self, page: Any) -> str:
        items = []
        for k, f in enumerate(page.findings):
            where = []
            for side, label in (("lhs", page.sides[0]["name"]), ("rhs", page.sides[1]["name"])):
                if f[side]:
                    node = next((n for n in page.sides[0 if side == "lhs" else 1]["nodes"]
                                 if n["id"] == f[side][0]), None)
                    desc = node.get("desc", f[side][0]) if node else f[side][0]
                    more = f" +{len(f[side]) - 1}" if len(f[side]) > 1 else ""
                    where.append(f'{_e(label)}: <a data-goto="{side}:{_e(f[side][0])}">'
                                 f"{_e(desc)}</a>{more}")
                else:
                    where.append(f"{_e(label)}: nothing there")
            src = []
            for key in ("lsrc", "rsrc"):
                loc = f.get(key)
                if loc:
                    excerpt = page.sources.get(loc)
                    body = self._excerpt(excerpt, loc) if excerpt else ""
                    src.append(f"<details><summary>{_e(loc)}</summary>{body}</details>"
                               if body else f"<div>{_e(loc)}</div>")
            if f.get("spec_line"):
                src.append(f'<div>spec line <a data-spec-line="{int(f["spec_line"])}">'
                           f"{int(f['spec_line'])}</a></div>")
            accepted = " accepted" if f.get("accepted") else ""
            items.append(
                f'<li class="finding{accepted}" data-k="{k}"><span class="code">'
                f"{_e(f['code'])}</span>{' (accepted)' if accepted else ''} "
                f"{_e(f['message'])}<div class=\"where\">{' · '.join(where)}"
                f"{' · blame: ' + _e(f['blamed']) if f.get('blamed') else ''}</div>"
                f'<div class="where">{"".join(src)}</div></li>')
        findings = (f"<ol>{''.join(items)}</ol>" if items else
                    '<p class="muted">No findings.</p>')
        panels = []
        for s in page.sides:
            panels.append(
                f'<div class="panel" data-side="{s["side"]}"><div class="bar">'
                f'<span class="name">{_e(s["name"])}: {_e(s["model"])}</span>'
                '<button data-act="in" title="zoom in">+</button>'
                '<button data-act="out" title="zoom out">−</button>'
                '<button data-act="fit" title="fit to the panel">fit</button>'
                '<button data-act="open" title="open every block">open all</button>'
                '</div><svg class="graph" role="img"></svg></div>')
        legend = ('<div class="legend"><span><i class="same"></i>same on both sides</span>'
                  '<span><i class="differs"></i>differs (a finding)</span>'
                  '<span><i class="only"></i>no counterpart on the other side</span>'
                  '<span><i class="io"></i>input / output</span>'
                  "<span>▸ a closed block: click to open · wheel to scroll · ctrl + wheel to zoom · drag to pan"
                  "</span></div>")
        return (f'<div class="top"><section id="findings"><h2>Findings</h2>{findings}'
                f'</section><section><div class="graphs">{"".join(panels)}</div>{legend}'
                '<div id="detail" class="muted">Click a finding or a node: its counterpart '
                "is shown on the other side.</div></section></div>")

    @staticmethod
    def _excerpt(excerpt: Any, loc: str) -> str:
        first, lines = excerpt
        hit = int(loc.rpartition(":")[2])
        out = []
        for i, line in enumerate(lines):
            no = first + i
            text = f"{no:>4}  {_e(line)}"
            out.append(f'<span class="hit">{text}</span>' if no == hit else text)
        return '<pre class="src">' + "\n".join(out) + "</pre>"

    @staticmethod
    def _equations(page: Any) -> str:
        if not page.equations:
            return ""
        names = [s["name"] for s in page.sides]
        rows = []
        for sec in page.equations:
            ends = [s for s in (sec["scope"], sec["rscope"]) if s]
            title = " ↔ ".join(dict.fromkeys(ends))
            rows.append(f'<tr class="sec"><th colspan="2">{_e(title)}'
                        f"{' — differs' if sec.get('differs') else ''}</th></tr>")
            for line in sec["lines"]:
                cls = ' class="differs"' if line["differs"] else ""
                attrs = "".join(f' data-{k}="{_e(line[n])}"'
                                for k, n in (("l", "lnode"), ("r", "rnode")) if line[n])
                rows.append(f"<tr{cls}{attrs}><td>{line['lhs'] or '<span class=muted>—</span>'}"
                            f"</td><td>{line['rhs'] or '<span class=muted>—</span>'}</td></tr>")
        folded = any(s["folds"] for s in page.sides)
        note = ('<p class="muted">Blocks folded in the graphs (identical to the first of '
                "their run) are not repeated here.</p>" if folded else "")
        return (f'<section id="equations"><h2>Equations</h2>{note}<table class="eqs">'
                f'<colgroup><col><col></colgroup><tr><th>{_e(names[0])}</th>'
                f"<th>{_e(names[1])}</th></tr>{''.join(rows)}</table></section>")

    @staticmethod
    def _spec(page: Any) -> str:
        if not page.spec:
            return ""
        by_line: dict[int, list[int]] = {}
        for k, f in enumerate(page.findings):
            if f.get("spec_line"):
                by_line.setdefault(int(f["spec_line"]), []).append(k)
        lines = []
        for no, line in enumerate(page.spec["lines"], start=1):
            hit = by_line.get(no)
            attrs = f' class="hit" data-k="{hit[0]}"' if hit else ""
            lines.append(f'<div id="spec-L{no}"{attrs}><span class="ln">{no}</span>'
                         f"{_e(line)}</div>")
        impl = []
        for k, f in enumerate(page.findings):
            loc = f.get("model_at") or f.get("lsrc")
            excerpt = page.sources.get(f.get("lsrc", ""))
            if loc:
                impl.append(f'<div class="finding" data-k="{k}"><span class="code">'
                            f"{_e(f['code'])}</span> {_e(loc)}"
                            f"{HtmlRenderer._excerpt(excerpt, f['lsrc']) if excerpt else ''}"
                            "</div>")
        return (f'<section id="spec"><h2>The spec beside the implementation</h2>'
                f'<div class="spec"><div><div class="muted">{_e(page.spec["path"])}</div>'
                f'<div class="yaml">{"".join(lines)}</div></div>'
                f'<div><div class="muted">the implementation at each finding</div>'
                f'{"".join(impl) or "<p class=muted>nothing to show</p>"}</div></div>'
                "</section>")

    @staticmethod
    def _notes(page: Any) -> str:
        notes = list(page.notes) + (page.numeric["notes"] if page.numeric else [])
        if not notes:
            return ""
        return ('<section id="notes"><h2>Notes</h2><ul class="notes">' +
                "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul></section>")
