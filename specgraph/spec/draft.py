"""``draft``: a spec drafted from an implementation's canonical graph, for a researcher to edit
instead of writing one from scratch.

Every node becomes a statement named after its scope, with its canonical attributes stated
(those that change training only, such as an embedding's ``padding_idx``, are left open);
the model's sizes are lifted into ``dims`` (its inputs' batch and sequence axes) and
``hyper`` (the width, the heads, the feed-forward size, the vocabulary, the norms' epsilon,
the number of layers); a run of blocks whose scopes count up (``encoder.layer.0`` ...
``encoder.layer.11``) and whose statements agree is folded into one block with
``repeat:``; a norm, a GELU or SiLU, an attention states its equation (``equation:``, which
``check`` compares), every other statement carries the one specgraph derives as a comment; and
the parameter counts are stated, per block and for the whole model. The draft compiles, and
the implementation it came from satisfies it.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgraph.errors import SpecgraphError
from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.spec.expr import evaluate
from specgraph.spec.vocabulary import RULES
from specgraph.symbolic import equations

__all__ = ["draft", "DraftError"]

_NUMBERED = re.compile(r"^(.*?)\.(\d+)(?:\.(.*))?$")
_PART = re.compile(r"[^A-Za-z0-9_]")
_SIZES = {"linear": ("out",), "embedding": ("num", "dim"), "conv": ("out", "kernel")}


class DraftError(SpecgraphError):
    """The model holds something a spec cannot state (a constant tensor of data)."""


@dataclass
class _Statement:
    name: str
    op: str
    refs: list[str]
    attrs: dict[str, Any]
    sizes: dict[str, Any] = field(default_factory=dict)
    comment: str = ""
    params: int = 0
    equation: str = ""


def draft(graph: Graph, *, reference: str, framework: str) -> str:
    """The spec of ``graph`` (a canonical graph), as YAML text.

    Args:
        graph: the implementation's canonical graph.
        reference: the model reference it came from (named in the draft's header).
        framework: its framework.

    Raises:
        DraftError: a node reads a constant tensor the spec language cannot state.
    """
    return _Drafter(graph, reference, framework).run()


class _Drafter:
    def __init__(self, graph: Graph, reference: str, framework: str) -> None:
        self.g, self.reference, self.framework = graph, reference, framework
        self.names: dict[Value, str] = {}
        self.prefix = _common_prefix([n.scope for n in graph.nodes])
        self.dims: dict[str, int] = {}
        self.hyper: dict[str, Any] = {}
        self.symbols: dict[Value, list[Any]] = {}
        self.renamed: dict[str, str] = {}  # a folded block's last statement -> the block

    # --- the document --------------------------------------------------------------------
    def run(self) -> str:
        inputs = self._inputs()
        self._lift()
        statements = self._statements()
        body, blocks = self._fold(statements)
        out = ["# yaml-language-server: $schema=spec.schema.json",
               f"# Drafted by `specgraph spec init` from {self.reference} ({self.framework}):",
               "# edit it to say what the paper says. Every attribute is stated; leave one out",
               "# (or write `unspecified`) where the paper does not say it.",
               "paper:", '  title: "TODO: the paper"', ""]
        if self.dims:
            out += ["dims: " + _flow(self.dims), ""]
        hyper = {**blocks, **self.hyper}
        if hyper:
            out += ["hyper:", *(f"  {k}: {_scalar(v)}" for k, v in hyper.items()), ""]
        out += ["inputs:", *inputs, "", "layers:", *body, "", "outputs:"]
        out += [f"  {name}: {json.dumps(self.renamed.get(self.names[v], self.names[v]))}"
                for name, v in zip(self.g.output_names, self.g.outputs)]
        total = sum(math.prod(v.shape) for v in self.g.params.values())
        out += ["", f"param_count: {total}", ""]
        return "\n".join(out)

    def _inputs(self) -> list[str]:
        out = []
        for name, v in zip(self.g.input_names, self.g.inputs):
            self.names[v] = name
            symbols = [self._dim(v, axis) for axis in range(len(v.shape))]
            self.symbols[v] = symbols
            shape = " ".join(str(s) for s in symbols)
            if v.dtype.startswith(("int", "uint")):
                high = self._vocabulary(v)
                out.append(f"  {name}: {{shape: {json.dumps(shape)}, dtype: {v.dtype}, "
                           f"range: [0, {high}]}}")
            else:
                out.append(f"  {name}: {{shape: {json.dumps(shape)}, dtype: {v.dtype}}}"
                           if v.dtype != "float32" else f"  {name}: {json.dumps(shape)}")
        return out

    def _dim(self, v: Value, axis: int) -> Any:
        """The name of an input's axis: B for the batch, T for a sequence, H and W for an
        image's height and width; other axes keep their size."""
        size = v.shape[axis]
        rank = len(v.shape)
        name = None
        if axis == 0 and rank >= 2:
            name = "B"
        elif axis == 1 and (v.dtype.startswith("int") or rank == 3):
            name = "T"
        elif rank == 4 and axis >= 2:
            name = "HW"[axis - 2]
        if name is None or self.dims.get(name, size) != size:
            return size
        self.dims[name] = size
        return name

    def _vocabulary(self, v: Value) -> int:
        for user in self.g.consumers(v):
            if user.op == "embedding" and user.inputs[0] is v:
                return user.inputs[1].shape[0]
        return 2

    # --- sizes ---------------------------------------------------------------------------
    def _lift(self) -> None:
        """The model's sizes as hyperparameters: the width, the heads, the feed-forward
        size, the vocabulary, the norms' epsilon."""
        outs = Counter(n.outputs[0].shape[-1] for n in self.g.nodes if n.op == "linear")
        widths = [size for size, _ in outs.most_common()]
        if not any(n.op == "attention" for n in self.g.nodes):
            widths = widths[:0]  # a transformer's sizes; other models keep their numbers
        if widths:
            self.hyper["d_model"] = widths[0]
        for n in self.g.nodes:
            if n.op == "attention" and len(n.inputs[0].shape) >= 3:
                heads, head = n.inputs[0].shape[-3], n.inputs[0].shape[-1]
                self.hyper.setdefault("heads", heads)
                if self.hyper.get("d_model") == heads * head:
                    self.hyper.setdefault("d_head", "d_model / heads")
                else:
                    self.hyper.setdefault("d_head", head)
        if len(widths) > 1:
            ff = widths[1]
            d = self.hyper["d_model"]
            self.hyper["d_ff"] = f"{ff // d} * d_model" if ff % d == 0 else ff
        for v in self.g.inputs:
            if v.dtype.startswith("int"):
                vocab = self._vocabulary(v)
                if vocab > 2:
                    self.hyper.setdefault("vocab", vocab)
        eps = Counter(n.attrs["eps"] for n in self.g.nodes if "eps" in n.attrs)
        if eps:
            self.hyper["eps"] = eps.most_common(1)[0][0]

    def _value_of(self, name: str) -> Any:
        value = self.hyper[name]
        if isinstance(value, str):  # an expression over earlier ones
            known = {k: v for k, v in self.hyper.items() if not isinstance(v, str)}
            return evaluate(value, known)
        return value

    def _named(self, value: Any, *names: str) -> Any:
        """``value`` as the first of ``names`` (hyperparameters) that has it, else itself."""
        for name in names:
            if name in self.hyper and self._value_of(name) == value:
                return name
        return value

    # --- statements ----------------------------------------------------------------------
    def _statements(self) -> list[_Statement]:
        base = [self._base(n.scope) for n in self.g.nodes]
        count = Counter(base)
        seen: Counter[tuple[str, str]] = Counter()
        out: list[_Statement] = []
        equations_at = self._equations()
        for i, node in enumerate(self.g.nodes):
            seen[(base[i], node.op)] += 1
            k = seen[(base[i], node.op)]
            if count[base[i]] == 1:
                name = base[i]
            elif base[i].rpartition(".")[2] == node.op:  # a module used again (one ReLU)
                name = base[i] + (f"_{k}" if k > 1 else "")
            else:
                name = f"{base[i]}.{node.op}" + (f"_{k}" if k > 1 else "")
            refs = [self._reference(node, slot, v, name, out)
                    for slot, v in enumerate(node.inputs) if self.g.param_name(v) is None]
            for v in node.outputs:
                self.names[v] = name if len(node.outputs) == 1 else \
                    f"{name}[{node.outputs.index(v)}]"
            self._propagate(node)
            attrs, sizes = self._attributes(node)
            params = sum(math.prod(v.shape) for v in node.inputs
                         if self.g.param_name(v) is not None)
            out.append(_Statement(name, node.op, refs, attrs, sizes, equations_at.get(i, ""),
                                  params, _equation(node)))
        return out

    def _base(self, scope: str) -> str:
        scope = scope[len(self.prefix):] if self.prefix and scope.startswith(self.prefix) \
            else scope
        parts = [_PART.sub("_", p) for p in scope.split(".") if p and p != "<model>"]
        return ".".join(parts) or "model"

    def _equations(self) -> dict[int, str]:
        return {max(eq.nodes): eq.text for eq in equations(self.g) if eq.nodes}

    def _reference(self, node: Node, slot: int, v: Value, name: str,
                   out: list[_Statement]) -> str:
        if v in self.names:
            return self.names[v]
        data = self.g.constants.get(v)
        if data is None:
            raise DraftError(f"{node.op} at {node.scope or '<model>'} reads a value the draft "
                             "cannot name")
        role = get_spec(node.op).inputs[slot].lstrip("*").partition("?")[0]
        const = f"{name}.{role}"
        out.append(self._constant(const, np.asarray(data), v, node))
        self.names[v] = const
        return const

    def _constant(self, name: str, data: np.ndarray, v: Value, node: Node) -> _Statement:
        """A constant as a statement: ``arange`` for 0, 1, 2, ... along its axis, ``full``
        for one value everywhere."""
        flat = data.reshape(-1)
        shape = [self._size(s) for s in data.shape]
        self.symbols[v] = shape
        if data.size and np.all(flat == flat[0]):
            value = flat[0].item()
            return _Statement(name, "full", [], {"shape": shape, "value": value,
                                                 "dtype": v.dtype})
        if data.ndim == 1 and np.array_equal(flat, np.arange(data.size)):
            return _Statement(name, "arange", [], {"start": 0, "limit": shape[0],
                                                   "dtype": v.dtype})
        raise DraftError(f"{node.op} at {node.scope or '<model>'} reads a constant tensor of "
                         f"shape {list(data.shape)} that is neither a range nor one value; a "
                         "spec states it as an input instead")

    def _size(self, size: int) -> Any:
        """A size as a dim where one has it (a sequence's length), else the number."""
        for name in ("T", "B"):
            if self.dims.get(name) == size:
                return name
        return size

    def _propagate(self, node: Node) -> None:
        """Each output's axes as dims where they carry one (B, T), else sizes."""
        first = self.symbols.get(node.inputs[0], []) if node.inputs else []
        for v in node.outputs:
            shape = v.shape
            if node.op == "transpose" and len(first) == len(shape):
                symbols = [first[p] for p in node.attrs["perm"]]
            else:  # the leading axes a layer keeps keep their names
                before = node.inputs[0].shape if node.inputs else ()
                symbols, keep = [], True
                for axis, size in enumerate(shape):
                    keep = keep and axis < len(first) and before[axis] == size
                    symbols.append(first[axis] if keep else size)
            self.symbols[v] = symbols

    def _attributes(self, node: Node) -> tuple[dict[str, Any], dict[str, Any]]:
        spec = get_spec(node.op)
        rule = RULES.get(node.op)
        derived = set(rule.derived(len(node.inputs))) if rule and rule.derived else set()
        attrs = {}
        for key, value in node.attrs.items():
            if key in derived or (spec.attrs.get(key) and spec.attrs[key].affects):
                continue  # set by the statement's form, or changes training only
            if value is None and spec.attrs.get(key) and spec.attrs[key].optional or \
                    key == "norm_type" and node.attrs.get("max_norm") is None:
                continue  # not set (an embedding's max_norm), or read only with another
            if key == "eps":
                value = self._named(value, "eps")
            elif key == "shape" and node.op == "reshape":
                value = self._shape(node)
            attrs[key] = value
        sizes: dict[str, Any] = {}
        weight = next((v for v in node.inputs if self.g.param_name(v) is not None), None)
        for key in _SIZES.get(node.op, ()):
            if weight is None:
                break
            if key == "out":
                out = weight.shape[-1] if node.op == "linear" else weight.shape[0]
                sizes[key] = self._named(out, "d_model", "d_ff")
            elif key == "kernel":
                sizes[key] = list(weight.shape[2:])
            elif key == "num":
                sizes[key] = self._named(weight.shape[0], "vocab")
            else:
                sizes[key] = self._named(weight.shape[1], "d_model")
        return attrs, sizes

    def _shape(self, node: Node) -> Any:
        symbols = list(self.symbols[node.outputs[0]])
        if len(symbols) >= 4 and "heads" in self.hyper and \
                (symbols[-2], symbols[-1]) == (self.hyper["heads"], self._value_of("d_head")):
            symbols[-2:] = ["heads", "d_head"]
        elif symbols and isinstance(symbols[-1], int):
            symbols[-1] = self._named(symbols[-1], "d_model")
        if all(isinstance(s, int) for s in symbols):
            return list(symbols)
        return " ".join(str(s) for s in symbols)

    # --- repeated blocks -----------------------------------------------------------------
    def _fold(self, statements: list[_Statement]) -> tuple[list[str], dict[str, int]]:
        """The statements as YAML lines, runs of numbered blocks that agree folded into
        ``repeat:`` blocks; and the hyperparameters that count their iterations."""
        lines: list[str] = []
        blocks: dict[str, int] = {}
        renamed = self.renamed
        i = 0
        while i < len(statements):
            run = _numbered_run(statements, i)
            folded = _fold_run(statements, run) if run else None
            if folded is None:
                lines += _lines(statements[i], renamed, "  ")
                i += 1
                continue
            prefix, iterations, carried, inner = folded
            count = len(iterations)
            key = "layers" if "layers" not in blocks else f"layers_{len(blocks) + 1}"
            blocks[key] = count
            last = iterations[-1][-1].name
            renamed[last] = f"{prefix}.{count - 1}"
            params = sum(s.params for s in iterations[0])
            lines += [f"  - name: \"{prefix}.{{i}}\"", f"    repeat: {key}"]
            if carried:
                lines.append(f"    in: {json.dumps(renamed.get(carried, carried))}")
            lines.append("    layers:")
            for s in inner:
                lines += _lines(s, renamed, "      ")
            lines.append(f"    param_count: {params}")
            i = run[-1] + 1
        return lines, blocks


def _numbered_run(statements: Sequence[_Statement], start: int) -> list[int]:
    """The statements from ``start`` that belong to ``P.0``, ``P.1``, ... in order."""
    match = _NUMBERED.match(statements[start].name)
    if not match or match.group(2) != "0":
        return []
    prefix = match.group(1)
    out, expected = [], 0
    for j in range(start, len(statements)):
        m = _NUMBERED.match(statements[j].name)
        if not m or m.group(1) != prefix:
            break
        k = int(m.group(2))
        if k == expected + 1:
            expected = k
        elif k != expected:
            break
        out.append(j)
    return out if expected >= 1 else []


def _fold_run(statements: Sequence[_Statement], run: list[int]
              ) -> tuple[str, list[list[_Statement]], str | None, list[_Statement]] | None:
    """The run as (prefix, iterations, the outer name the first iteration reads where the
    later ones read the previous iteration's output, the inner statements of the block), or
    None where the iterations do not agree or another statement reads inside them."""
    prefix = _NUMBERED.match(statements[run[0]].name).group(1)
    iterations: list[list[_Statement]] = []
    for j in run:
        k = int(_NUMBERED.match(statements[j].name).group(2))
        while len(iterations) <= k:
            iterations.append([])
        iterations[k].append(statements[j])
    names = [{s.name for s in it} for it in iterations]
    later = {r for s in statements[run[-1] + 1:] for r in s.refs}
    if any(n in later for it in iterations for n in (s.name for s in it)
           if n != iterations[-1][-1].name):
        return None
    shapes = []
    first_outside = None
    for k, it in enumerate(iterations):
        shape = []
        for s in it:
            refs = []
            for r in s.refs:
                if r.split("[")[0] in names[k]:
                    refs.append(("in", _relative(prefix, k, r)))
                elif k > 0 and r == iterations[k - 1][-1].name:
                    refs.append(("carry",))
                else:
                    refs.append(("out", r))
            shape.append((_relative(prefix, k, s.name), s.op, repr(s.attrs), repr(s.sizes),
                          refs))
        shapes.append(shape)
    if len(shapes) < 2 or any(sh != shapes[1] for sh in shapes[2:]):
        return None
    for (rel0, op0, a0, z0, refs0), (rel1, op1, a1, z1, refs1) in zip(shapes[0], shapes[1]):
        if (rel0, op0, a0, z0) != (rel1, op1, a1, z1) or len(refs0) != len(refs1):
            return None
        for x, y in zip(refs0, refs1):
            if y == ("carry",):
                if x[0] != "out" or first_outside not in (None, x[1]):
                    return None
                first_outside = x[1]
            elif x != y:
                return None
    inner = []
    for s, (rel, _, _, _, refs) in zip(iterations[0], shapes[1]):
        inner.append(_Statement(rel, s.op, [first_outside if r == ("carry",) else r[1]
                                            for r in refs], s.attrs, s.sizes, s.comment,
                                s.params, s.equation))
    return prefix, iterations, first_outside, inner


def _relative(prefix: str, k: int, name: str) -> str:
    head = f"{prefix}.{k}."
    return name[len(head):] if name.startswith(head) else name


def _common_prefix(scopes: Sequence[str]) -> str:
    """A leading scope part every node shares that names no module of its own (Flax's
    ``FlaxBertModule.``), with its dot; else empty."""
    firsts = {s.split(".")[0] for s in scopes}
    if len(firsts) == 1 and all("." in s for s in scopes):
        first = firsts.pop()
        if first and first[0].isupper():
            return first + "."
    return ""


def _lines(s: _Statement, renamed: Mapping[str, str], indent: str) -> list[str]:
    refs = [renamed.get(r, r) for r in s.refs]
    ref = json.dumps(refs[0]) if len(refs) == 1 else "[" + ", ".join(
        json.dumps(r) for r in refs) + "]"
    parts = [f"name: {json.dumps(s.name)}", f"{s.op}: {ref}"]
    parts += [f"{k}: {_scalar(v)}" for k, v in {**s.sizes, **s.attrs}.items()]
    if s.equation:
        parts.append(f"equation: {json.dumps(s.equation)}")
    out = [f"{indent}# {s.comment}"] if s.comment and not s.equation else []
    return out + [f"{indent}- {{{', '.join(parts)}}}"]


_GELU_TANH = "x * (1 + tanh(0.7978845608 * (x + 0.044715 * x**3))) / 2"


def _equation(node: Node) -> str:
    """The node's op as an equation in the spec's notation, where the op has one that
    ``check`` compares (``specgraph.spec.algebra``), else ""."""
    a = node.attrs
    if node.op in ("layer_norm", "rms_norm"):
        y = "(x - mean(x)) / sqrt(var(x) + eps)" if node.op == "layer_norm" else \
            "x / sqrt(mean(x**2) + eps)"
        y += " * weight" if a.get("scale", True) else ""
        return y + (" + bias" if a.get("bias", True) and node.op == "layer_norm" else "")
    if node.op == "gelu":
        return _GELU_TANH if a.get("approximate") == "tanh" else "x * (1 + erf(x / sqrt(2))) / 2"
    if node.op == "silu":
        return "x * sigmoid(x)"
    if node.op == "attention" and not a.get("causal") and not a.get("has_mask"):
        return "softmax(scale * q @ k.T) @ v"
    return ""


def _scalar(value: Any) -> str:
    """A value as YAML the spec reader reads back to the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return repr(value)
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa}{'' if '.' in mantissa else '.0'}{e}{exponent}" if e else text
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def _flow(mapping: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in mapping.items()) + "}"
