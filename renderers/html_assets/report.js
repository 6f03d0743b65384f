"use strict";
// specgraph report: both graphs laid out per scope with dagre (each scope on its own, sized
// for its parent), folding, zoom and pan, findings that focus their nodes on both sides.
// Every name from a model reaches the page through textContent or setAttribute, never markup.
(function () {
  const DATA = JSON.parse(document.getElementById("specgraph-data").textContent);
  const NS = "http://www.w3.org/2000/svg";
  const CHAR = 7.2, NODE_H = 26, HEAD_H = 24, PAD = 10;
  const MIN_FIT = 0.55;  // "fit" never shrinks labels below this scale: the rest scrolls

  function el(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  // 3 significant digits, e-notation below 1e-3 and from 1e3 on (as the page's markup)
  function fmt(v) {
    if (typeof v !== "number" || !isFinite(v)) return String(v);
    if (v === 0) return "0";
    const r = Number(v.toPrecision(3));
    if (Math.abs(r) >= 1e-3 && Math.abs(r) < 1e3) return String(r);
    let [m, e] = r.toExponential(2).split("e");
    if (m.includes(".")) m = m.replace(/0+$/, "").replace(/\.$/, "");
    return m + "e" + Number(e);
  }
  function text(tag, content, cls) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    e.textContent = content;
    return e;
  }

  class Side {
    constructor(data, panel) {
      this.d = data; this.panel = panel;
      this.svg = panel.querySelector("svg.graph");
      this.view = el("g", {class: "viewport"}, this.svg);
      this.nodes = new Map(data.nodes.map(n => [n.id, n]));
      this.scopes = new Map(data.scopes.map(s => [s.id, s]));
      this.open = new Map(data.scopes.map(s => [s.id, !!s.open]));
      this.folds = new Map(data.folds.map(f => [f.id, f]));
      this.foldOpen = new Map(data.folds.map(f => [f.id, !!f.open]));
      this.foldOf = new Map();  // member scope -> fold id
      for (const f of data.folds) for (const m of f.members) this.foldOf.set(m, f.id);
      this.kids = new Map();  // scope -> child scopes, in order
      for (const s of data.scopes) {
        if (s.parent === null) continue;
        if (!this.kids.has(s.parent)) this.kids.set(s.parent, []);
        this.kids.get(s.parent).push(s.id);
      }
      this.ops = new Map();  // scope -> its own nodes, in graph order
      for (const n of data.nodes) {
        if (!this.ops.has(n.scope)) this.ops.set(n.scope, []);
        this.ops.get(n.scope).push(n.id);
      }
      this.count = new Map();  // scope -> nodes inside it, every depth
      this.marked = new Map();  // scope -> whether a node inside differs
      for (const n of data.nodes) {
        for (let s = n.scope; s !== null && s !== undefined; s = this.scopes.get(s).parent) {
          this.count.set(s, (this.count.get(s) || 0) + 1);
          if (n.st === "differs" || n.st === "only" || n.f) this.marked.set(s, true);
        }
      }
      this.cache = new Map();  // scope -> its layout while nothing inside changes
      this.selected = null; this.peerMark = null; this.nearMark = null;
      this.note = text("span", "", "note");
      panel.querySelector(".bar .name").after(this.note);
      this.t = {x: 0, y: 0, k: 1};
      this.pan();
    }

    chain(scope) {  // the scopes from the model down to ``scope``
      const out = [];
      for (let s = scope; s !== null && s !== undefined; s = this.scopes.get(s).parent) out.push(s);
      return out.reverse();
    }

    // the items a node stands under, from the model down to what is drawn for it
    path(id) {
      const n = this.nodes.get(id), chain = this.chain(n.scope), out = [];
      for (let i = 0; i < chain.length; i++) {
        const s = chain[i];
        if (i + 1 < chain.length) {
          const child = chain[i + 1], fold = this.foldOf.get(child);
          if (fold !== undefined && !this.foldOpen.get(fold)) { out.push([s, "f:" + fold]); return out; }
          out.push([s, "s:" + child]);
          if (!this.open.get(child)) return out;
        } else {
          out.push([s, "n:" + id]);
        }
      }
      return out;
    }

    items(scope) {  // what is drawn directly in an open scope
      const out = [];
      for (const id of this.ops.get(scope) || []) out.push("n:" + id);
      const seen = new Set();
      for (const c of this.kids.get(scope) || []) {
        const fold = this.foldOf.get(c);
        if (fold !== undefined && !this.foldOpen.get(fold)) {
          if (!seen.has(fold)) { seen.add(fold); out.push("f:" + fold); }
        } else out.push("s:" + c);
      }
      return out;
    }

    edgesAt(scope) {  // edges between this scope's items, each once (indexed per state)
      if (!this.edgeIndex) {
        this.edgeIndex = new Map();
        for (const [u, v] of this.d.edges) {
          const pu = this.path(u), pv = this.path(v);
          for (let i = 0; i < Math.min(pu.length, pv.length); i++) {
            if (pu[i][0] !== pv[i][0]) break;
            if (pu[i][1] !== pv[i][1]) {
              const at = pu[i][0];
              if (!this.edgeIndex.has(at)) this.edgeIndex.set(at, new Map());
              this.edgeIndex.get(at).set(pu[i][1] + "|" + pv[i][1], [pu[i][1], pv[i][1]]);
              break;
            }
          }
        }
      }
      return [...(this.edgeIndex.get(scope) || new Map()).values()];
    }

    label(item) {
      const full = this.fullLabel(item);
      return full.length > 60 ? full.slice(0, 59) + "…" : full;
    }

    fullLabel(item) {
      const [kind, key] = [item.slice(0, 1), item.slice(2)];
      if (kind === "n") { const n = this.nodes.get(key); return n.op === "input" || n.op === "output" ? n.op + " " + n.label : n.label; }
      if (kind === "f") return this.folds.get(key).label;
      const s = this.scopes.get(Number(key));
      return s.label + "  (" + (this.count.get(s.id) || 0) + ")";
    }

    size(item) {
      const kind = item[0];
      const w = Math.max(64, this.label(item).length * CHAR + 20);
      if (kind === "s") {
        const id = Number(item.slice(2));
        if (this.open.get(id)) {
          const lay = this.layout(id);
          return [Math.max(lay.w + 2 * PAD, w), lay.h + HEAD_H + PAD];
        }
        return [w + 14, NODE_H + 6];
      }
      if (kind === "f") return [w + 14, NODE_H + 12];
      return [w, NODE_H];
    }

    // dagre over one scope's items only (never the flat graph), children laid out first
    layout(scope) {
      if (this.cache.has(scope)) return this.cache.get(scope);
      const g = new dagre.graphlib.Graph();
      g.setGraph({rankdir: "TB", nodesep: 18, ranksep: 26, marginx: 6, marginy: 6});
      g.setDefaultEdgeLabel(() => ({}));
      const items = this.items(scope);
      for (const it of items) { const [w, h] = this.size(it); g.setNode(it, {width: w, height: h}); }
      for (const [a, b] of this.edgesAt(scope)) g.setEdge(a, b);
      dagre.layout(g);
      const lay = {w: g.graph().width || 0, h: g.graph().height || 0, items: new Map(), edges: []};
      for (const it of items) { const p = g.node(it); lay.items.set(it, {x: p.x - p.width / 2, y: p.y - p.height / 2, w: p.width, h: p.height}); }
      for (const e of g.edges()) lay.edges.push(g.edge(e).points);
      this.cache.set(scope, lay);
      return lay;
    }

    invalidate(scope) { this.edgeIndex = null; for (const s of this.chain(scope)) this.cache.delete(s); }

    draw() {
      this.view.textContent = "";
      this.where = new Map();  // item -> absolute box
      const root = this.layout(0);
      this.drawScope(0, this.view, 0, 0, root, 0, 0);
      this.mark();
    }

    // ``ox, oy``: this scope's origin in its parent element, whose origin is ``px, py``
    drawScope(scope, parent, ox, oy, lay, px, py) {
      const g = el("g", {transform: `translate(${ox},${oy})`}, parent);
      const ax = px + ox, ay = py + oy;
      for (const pts of lay.edges) {
        const d = pts.map((p, i) => (i ? "L" : "M") + p.x.toFixed(1) + " " + p.y.toFixed(1)).join(" ");
        el("path", {class: "edge", d}, g);
        const a = pts[pts.length - 2], b = pts[pts.length - 1];
        const ang = Math.atan2(b.y - a.y, b.x - a.x), s = 5;
        const p1 = [b.x - s * Math.cos(ang - 0.45), b.y - s * Math.sin(ang - 0.45)];
        const p2 = [b.x - s * Math.cos(ang + 0.45), b.y - s * Math.sin(ang + 0.45)];
        el("path", {class: "arrow", d: `M${b.x} ${b.y}L${p1[0]} ${p1[1]}L${p2[0]} ${p2[1]}Z`}, g);
      }
      for (const [it, box] of lay.items) {
        this.where.set(it, {x: ax + box.x, y: ay + box.y, w: box.w, h: box.h});
        const kind = it[0], key = it.slice(2);
        if (kind === "n") this.drawNode(g, key, box);
        else if (kind === "f") this.drawFold(g, key, box);
        else this.drawChild(g, Number(key), box, ax, ay);
      }
    }

    drawNode(g, id, box) {
      const n = this.nodes.get(id);
      const cls = "g-node st-" + n.st + (n.f ? " has-f" : "");
      const ng = el("g", {class: cls, "data-id": id, transform: `translate(${box.x},${box.y})`}, g);
      el("rect", {width: box.w, height: box.h, rx: 4}, ng);
      const t = el("text", {x: box.w / 2, y: box.h / 2 + 4, "text-anchor": "middle"}, ng);
      t.textContent = this.label("n:" + id);
      const tip = el("title", {}, ng);
      const none = n.st === "only" ? "\nno counterpart on the other side" : "";
      tip.textContent = (n.desc || n.label) + none + (n.info ? "\n" + n.info : "") + (n.src ? "\n" + n.src : "");
      ng.addEventListener("click", ev => { ev.stopPropagation(); App.select(this, id, true); });
    }

    drawFold(g, key, box) {
      const f = this.folds.get(key);
      const fg = el("g", {class: "g-fold", "data-fold": key, transform: `translate(${box.x},${box.y})`}, g);
      el("rect", {class: "back", x: 6, y: 0, width: box.w - 6, height: box.h - 6, rx: 4}, fg);
      el("rect", {x: 0, y: 6, width: box.w - 6, height: box.h - 6, rx: 4}, fg);
      const t = el("text", {x: 8, y: box.h / 2 + 7}, fg);
      t.textContent = "▸ " + this.label("f:" + key);
      el("title", {}, fg).textContent = f.label + "\nclick to unfold: " + f.members.length + " blocks";
      fg.addEventListener("click", ev => { ev.stopPropagation(); this.foldOpen.set(key, true); this.invalidate(f.scope); this.draw(); });
    }

    drawChild(g, id, box, ax, ay) {
      const s = this.scopes.get(id), marked = this.marked.get(id) ? " marked" : "";
      if (!this.open.get(id)) {
        const cg = el("g", {class: "g-closed" + marked, "data-scope": String(id), transform: `translate(${box.x},${box.y})`}, g);
        el("rect", {width: box.w, height: box.h, rx: 6}, cg);
        const t = el("text", {x: 8, y: box.h / 2 + 4}, cg);
        t.textContent = "▸ " + this.label("s:" + id);
        el("title", {}, cg).textContent = (s.path || "model") + ": click to open";
        cg.addEventListener("click", ev => { ev.stopPropagation(); this.toggle(id); });
        return;
      }
      const sg = el("g", {class: "g-scope" + marked + (s.part ? " part" : ""), "data-scope": String(id)}, g);
      el("rect", {class: "box", x: box.x, y: box.y, width: box.w, height: box.h, rx: 6}, sg);
      const head = el("g", {class: "head", transform: `translate(${box.x},${box.y})`}, sg);
      el("rect", {width: box.w, height: HEAD_H - 4, rx: 6}, head);
      const t = el("text", {x: 8, y: 15}, head);
      t.textContent = "▾ " + s.label;
      el("title", {}, head).textContent = (s.path || "model") + ": click to close";
      head.addEventListener("click", ev => { ev.stopPropagation(); this.toggle(id); });
      const inner = this.layout(id);
      const dx = box.x + (box.w - inner.w) / 2, dy = box.y + HEAD_H;
      this.drawScope(id, sg, dx, dy, inner, ax, ay);
    }

    toggle(id) { this.open.set(id, !this.open.get(id)); this.invalidate(id); this.draw(); }

    reveal(id) {  // open every scope and fold above a node
      const n = this.nodes.get(id);
      if (!n) return false;
      let changed = false;
      for (const s of this.chain(n.scope)) {
        const fold = this.foldOf.get(s);
        if (fold !== undefined && !this.foldOpen.get(fold)) { this.foldOpen.set(fold, true); changed = true; this.invalidate(this.folds.get(fold).scope); }
        if (!this.open.get(s)) { this.open.set(s, true); changed = true; this.invalidate(s); }
      }
      if (changed) this.draw();
      return true;
    }

    box(id) { return this.where.get("n:" + id); }

    center(id) {
      const b = this.box(id);
      if (!b) return;
      const r = this.svg.getBoundingClientRect();
      this.t.k = Math.max(1, Math.min(this.t.k, 1.6));
      this.t.x = r.width / 2 - (b.x + b.w / 2) * this.t.k;
      this.t.y = r.height / 2 - (b.y + b.h / 2) * this.t.k;
      this.apply();
    }

    // the whole graph when it fits at a readable scale; else its top at MIN_FIT, to scroll
    fit() {
      const lay = this.layout(0), r = this.svg.getBoundingClientRect();
      const whole = Math.min((r.width - 20) / Math.max(lay.w, 1), (r.height - 20) / Math.max(lay.h, 1));
      const k = Math.max(MIN_FIT, Math.min(1.2, whole));
      const x = lay.w * k <= r.width - 20 ? (r.width - lay.w * k) / 2 : 10;
      this.t = {k, x, y: 10};
      this.apply();
    }

    refocus() {  // after a redraw: back on the selection, or the whole graph
      const id = this.selected || this.peerMark || this.nearMark;
      if (id && this.box(id)) this.center(id); else this.fit();
    }

    say(message) { this.note.textContent = message; this.note.title = message; }

    clear() { this.selected = null; this.peerMark = null; this.nearMark = null; this.say(""); this.mark(); }

    apply() { this.view.setAttribute("transform", `translate(${this.t.x.toFixed(1)},${this.t.y.toFixed(1)}) scale(${this.t.k.toFixed(4)})`); }

    zoom(f, cx, cy) {
      const r = this.svg.getBoundingClientRect();
      if (cx === undefined) { cx = r.width / 2; cy = r.height / 2; }
      const k = Math.max(0.05, Math.min(4, this.t.k * f));
      this.t.x = cx - (cx - this.t.x) * (k / this.t.k);
      this.t.y = cy - (cy - this.t.y) * (k / this.t.k);
      this.t.k = k; this.apply();
    }

    pan() {
      let drag = null;
      this.svg.addEventListener("wheel", ev => {  // scroll; zoom with ctrl (and pinch)
        ev.preventDefault();
        const r = this.svg.getBoundingClientRect();
        const unit = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? r.height : 1;
        if (ev.ctrlKey || ev.metaKey) { this.zoom(Math.exp(-ev.deltaY * unit * 0.0015), ev.clientX - r.left, ev.clientY - r.top); return; }
        const [dx, dy] = ev.shiftKey && !ev.deltaX ? [ev.deltaY, 0] : [ev.deltaX, ev.deltaY];
        this.t.x -= dx * unit; this.t.y -= dy * unit; this.apply();
      }, {passive: false});
      this.svg.addEventListener("pointerdown", ev => { drag = [ev.clientX, ev.clientY, this.t.x, this.t.y]; this.svg.classList.add("dragging"); });
      window.addEventListener("pointermove", ev => { if (!drag) return; this.t.x = drag[2] + ev.clientX - drag[0]; this.t.y = drag[3] + ev.clientY - drag[1]; this.apply(); });
      window.addEventListener("pointerup", () => { drag = null; this.svg.classList.remove("dragging"); });
    }

    mark() {
      for (const e of this.view.querySelectorAll(".g-node.sel, .g-node.peer, .g-node.near")) e.classList.remove("sel", "peer", "near");
      for (const [id, cls] of [[this.selected, "sel"], [this.peerMark, "peer"], [this.nearMark, "near"]]) {
        if (!id) continue;
        const e = this.view.querySelector(`.g-node[data-id="${id}"]`);
        if (e) e.classList.add(cls);
      }
    }
  }

  const App = {
    sides: [],
    init() {
      const panels = document.querySelectorAll(".panel");
      DATA.sides.forEach((d, i) => this.sides.push(new Side(d, panels[i])));
      for (const s of this.sides) {
        s.draw(); s.fit();
        s.panel.querySelector("[data-act=fit]").addEventListener("click", () => s.fit());
        s.panel.querySelector("[data-act=in]").addEventListener("click", () => s.zoom(1.25));
        s.panel.querySelector("[data-act=out]").addEventListener("click", () => s.zoom(0.8));
        s.panel.querySelector("[data-act=open]").addEventListener("click", () => { for (const k of s.open.keys()) s.open.set(k, true); for (const k of s.foldOpen.keys()) s.foldOpen.set(k, true); s.cache.clear(); s.edgeIndex = null; s.draw(); s.refocus(); });
      }
      document.querySelectorAll(".finding").forEach(li => li.addEventListener("click", ev => {
        if (ev.target.closest("details")) return;
        this.finding(Number(li.dataset.k));
      }));
      document.querySelectorAll("[data-goto]").forEach(a => a.addEventListener("click", ev => {
        ev.stopPropagation();
        const [side, id] = a.dataset.goto.split(":");
        this.select(this.sides[side === "lhs" ? 0 : 1], id, true);
      }));
      document.querySelectorAll(".chart .pt, tr[data-l]").forEach(p => p.addEventListener("click", () => {
        if (p.dataset.l) this.select(this.sides[0], p.dataset.l, true);
        else if (p.dataset.r) this.select(this.sides[1], p.dataset.r, true);
        document.querySelector(".graphs").scrollIntoView({block: "nearest"});
      }));
      document.querySelectorAll(".yaml div.hit").forEach(line => line.addEventListener("click", () => {
        this.finding(Number(line.dataset.k));
        document.querySelector(".graphs").scrollIntoView({block: "start"});
      }));
      const chart = document.getElementById("error-chart");  // shrinks to the page, then scrolls
      if (chart) chart.style.minWidth = Math.round(Number(chart.dataset.width) * 0.75) + "px";
      document.querySelectorAll("[data-spec-line]").forEach(a => a.addEventListener("click", ev => {
        ev.stopPropagation();
        const line = document.getElementById("spec-L" + a.dataset.specLine);
        if (line) { line.scrollIntoView({block: "center"}); line.classList.add("flash"); setTimeout(() => line.classList.remove("flash"), 1500); }
      }));
      document.body.dataset.ready = "1";
    },
    finding(k) {
      const f = DATA.findings[k];
      document.querySelectorAll(".finding.sel").forEach(e => e.classList.remove("sel"));
      const li = document.querySelector(`.finding[data-k="${k}"]`);
      if (li) li.classList.add("sel");
      const [L, R] = this.sides;
      if (f.lhs.length && f.rhs.length) { this.select(L, f.lhs[0], false); this.select(R, f.rhs[0], false); }
      else if (f.lhs.length) this.select(L, f.lhs[0], true);
      else if (f.rhs.length) this.select(R, f.rhs[0], true);
      else for (const s of this.sides) s.clear();
      this.focused = {k, lhs: f.lhs[0] || null, rhs: f.rhs[0] || null};
      document.body.dataset.focused = String(k);
    },
    select(side, id, peer) {
      if (!side.reveal(id)) return;
      side.clear(); side.selected = id; side.mark(); side.center(id);
      const n = side.nodes.get(id);
      this.detail(side, n);
      if (!peer) return;
      const other = this.sides[side === this.sides[0] ? 1 : 0];
      other.clear();
      if (n.peer && other.reveal(n.peer)) { other.peerMark = n.peer; other.mark(); other.center(n.peer); }
      else if (n.near && other.reveal(n.near)) {  // where the counterpart would be
        other.nearMark = n.near; other.mark(); other.center(n.near);
        other.say("no counterpart of " + (n.desc || n.label) + " here: near " + (other.nodes.get(n.near).desc || n.near));
      } else if (n.st === "only") other.say("no counterpart of " + (n.desc || n.label) + " here");
    },
    detail(side, n) {
      const box = document.getElementById("detail");
      box.textContent = "";
      const head = text("div", ""); head.appendChild(text("b", side.d.name + ": ")); head.appendChild(text("span", n.desc || n.label));
      box.appendChild(head);
      if (n.info) box.appendChild(text("div", n.info));
      const bits = [];
      if (n.peer) bits.push("counterpart: " + (this.sides[side === this.sides[0] ? 1 : 0].nodes.get(n.peer).desc || n.peer));
      else if (n.st === "only") bits.push("no counterpart on the other side");
      if (n.fw !== undefined) bits.push("forward error " + fmt(n.fw));
      if (n.bw !== undefined) bits.push("backward error " + fmt(n.bw));
      if (n.src) bits.push("source " + n.src);
      if (bits.length) box.appendChild(text("div", bits.join(" · "), "k"));
      const src = DATA.sources[n.src];
      if (src) box.appendChild(excerpt(src, n.src));
    },
  };

  function excerpt(src, loc) {
    const pre = document.createElement("pre"); pre.className = "src";
    const hit = Number(loc.split(":").pop());
    src[1].forEach((line, i) => {
      const no = src[0] + i;
      pre.appendChild(text("span", String(no).padStart(4) + "  " + line, no === hit ? "hit" : ""));
      pre.appendChild(document.createTextNode("\n"));
    });
    return pre;
  }

  App.fmt = fmt;
  window.specgraph = App;
  App.init();
})();
