"""Shortcuts of the JAX frontend: library functions that ARE canonical ops become that op.

Two kinds, both verified before they are taken:

* a named call (``custom_jvp_call[name=relu]``, ``jit[name=log_softmax]``, ``jit[name=_take]``)
  becomes its canonical op when its body is exactly what the library function produces for
  the same operands (compared with a template traced once per signature and cached);
* an inlined library function (``jax.nn.gelu`` and ``jax.nn.softmax`` are not wrapped in a
  call) is found from the equation's traceback, which passes through the function, and its
  run of equations is replaced when it matches the function's template equation for
  equation and none of its intermediate values is read elsewhere.

Anything that does not match is inlined primitive by primitive: a shortcut is never a guess.
"""

from __future__ import annotations

import contextlib
import enum
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

__all__ = ["named_call", "match_window", "fingerprint"]


# --- structural fingerprints -------------------------------------------------------------
def fingerprint(eqns: Sequence[Any], outvars: Sequence[Any], seed: Sequence[Any] = ()) -> tuple:
    """A hashable description of ``eqns`` that is equal for two runs of equations exactly
    when they compute the same thing: primitives, parameters, literals and wiring
    (variables numbered by first appearance, ``seed`` first)."""
    ids: dict[Any, int] = {v: i for i, v in enumerate(seed)}

    def ref(atom: Any) -> Any:
        if isinstance(atom, Literal):
            return ("lit", str(atom.aval.dtype), np.asarray(atom.val).tobytes())
        key = ids.get(atom)
        if key is None:
            key = ids[atom] = len(ids)
        return key

    items: list[Any] = []
    for e in eqns:
        items.append((e.primitive.name, tuple(ref(v) for v in e.invars), _params_key(e.params),
                      tuple(ref(v) for v in e.outvars)))
    items.append(tuple(ref(v) for v in outvars))
    return tuple(items)


def _params_key(params: dict[str, Any]) -> tuple:
    return tuple((k, _param_key(v)) for k, v in sorted(params.items()))


def _param_key(value: Any) -> Any:
    if isinstance(value, ClosedJaxpr):
        consts = tuple(np.asarray(c).tobytes() for c in value.consts)
        return ("closed", _body_key(value.jaxpr), consts)
    if isinstance(value, Jaxpr):
        return ("jaxpr", _body_key(value))
    if isinstance(value, (tuple, list)):
        return tuple(_param_key(v) for v in value)
    if value is None or isinstance(value, (str, int, float, bool, np.dtype, enum.Enum)):
        return repr(value)
    if type(value).__module__.startswith("jax") and hasattr(value, "_fields"):
        return repr(value)  # named tuples of dimension numbers
    return type(value).__name__  # functions (jvp rules), meshes: not part of the value


def _body_key(jaxpr: Jaxpr) -> tuple:
    return fingerprint(jaxpr.eqns, jaxpr.outvars, [*jaxpr.constvars, *jaxpr.invars])


def _avals_key(atoms: Sequence[Any]) -> tuple:
    return tuple((tuple(a.aval.shape), str(a.aval.dtype), getattr(a.aval, "weak_type", False))
                 for a in atoms)


@functools.lru_cache(maxsize=1024)
def _template(kind: str, attrs: tuple, avals: tuple) -> Any | None:
    """The closed jaxpr of library function ``kind`` with ``attrs`` on operands ``avals``
    (None if the function does not take such operands: then nothing matches it)."""
    fn = _TEMPLATE_FNS[kind](dict(attrs))
    specs = [jax.ShapeDtypeStruct(s, np.dtype(d), weak_type=w) for s, d, w in avals]
    try:
        with _template_context(kind):
            return jax.make_jaxpr(fn)(*specs)
    except Exception:  # noqa: BLE001  (any failure only means: no shortcut)
        return None


def _template_context(kind: str) -> Any:
    if kind == "_softmax":  # jax.nn.softmax is a named custom_jvp only under this flag
        try:
            from jax._src import config

            return config.softmax_custom_jvp(True)
        except (ImportError, AttributeError):
            pass
    return contextlib.nullcontext()


# --- named calls -------------------------------------------------------------------------
@dataclass(frozen=True)
class Shortcut:
    """A named call that is a canonical op.

    Attributes:
        primitive: the call primitive that carries the name.
        origin: the library function, recorded as the node's origin.
        attrs: reads the function's arguments from the call (None: not this function).
        emit: adds the canonical node(s) for the call's operands.
    """

    primitive: str
    origin: str
    attrs: Callable[[Any, Any, Jaxpr], dict[str, Any] | None]
    emit: Callable[[Any, Any, dict[str, Any]], Any]


def _no_attrs(cx: Any, eqn: Any, body: Jaxpr) -> dict[str, Any]:
    return {}


def _unary(op: str, **fixed: Any) -> Callable[[Any, Any, dict[str, Any]], Any]:
    def emit(cx: Any, eqn: Any, attrs: dict[str, Any]) -> Any:
        canonical = {k: v for k, v in attrs.items() if not k.startswith("_")}
        return cx.emit(op, [cx.value(eqn.invars[0])], {**canonical, **fixed})

    return emit


def _reduce_axis(cx: Any, eqn: Any, body: Jaxpr) -> dict[str, Any] | None:
    for e in body.eqns:
        if e.primitive.name == "reduce_max":
            axes = e.params["axes"]
            return {"axis": int(axes[0])} if len(axes) == 1 else None
    return None


def _slope(default: float) -> Callable[[Any, Any, Jaxpr], dict[str, Any] | None]:
    """The alpha of leaky_relu / elu: an operand when passed explicitly, else the default."""

    def attrs(cx: Any, eqn: Any, body: Jaxpr) -> dict[str, Any] | None:
        if len(eqn.invars) == 1:
            return {"alpha": default, "_explicit": False}
        value = cx.known(eqn.invars[1])
        if len(eqn.invars) != 2 or value is None or value.size != 1:
            return None
        return {"alpha": _shortest(value), "_explicit": True}

    return attrs


def _shortest(value: np.ndarray) -> float:
    """The shortest decimal that rounds to the same number in its own precision (a float32
    0.2 is 0.2, not 0.20000000298)."""
    scalar = value.reshape(()).astype(value.dtype if value.dtype.kind == "f" else np.float64)[()]
    return float(np.format_float_positional(scalar, unique=True, trim="-"))


def _clip_bounds(cx: Any, eqn: Any, body: Jaxpr) -> dict[str, Any] | None:
    """jnp.clip(x, lo, hi) with both bounds known scalars (``None`` bounds are not passed)."""
    if len(eqn.invars) != 3:
        return None
    bounds = [cx.known(v) for v in eqn.invars[1:]]
    if any(b is None or b.size != 1 for b in bounds):
        return None
    return {"min": float(bounds[0].reshape(())), "max": float(bounds[1].reshape(()))}


def _trilu_k(cx: Any, eqn: Any, body: Jaxpr) -> dict[str, Any] | None:
    for e in body.eqns:
        if e.primitive.name == "add" and isinstance(e.invars[1], Literal):
            return {"k": int(np.asarray(e.invars[1].val))}
    return {"k": 0}


def _take_axis(cx: Any, eqn: Any, body: Jaxpr) -> dict[str, Any] | None:
    for e in body.eqns:
        if e.primitive.name == "gather":
            index_map = e.params["dimension_numbers"].start_index_map
            return {"axis": int(index_map[0])} if len(index_map) == 1 else None
    return None


def _emit_trilu(upper: bool) -> Callable[[Any, Any, dict[str, Any]], Any]:
    def emit(cx: Any, eqn: Any, attrs: dict[str, Any]) -> Any:
        return cx.emit("trilu", [cx.value(eqn.invars[0])], {"upper": upper, "k": attrs["k"]})

    return emit


def _emit_take(cx: Any, eqn: Any, attrs: dict[str, Any]) -> Any:
    table, ids = eqn.invars
    if cx.is_param(table) and len(table.aval.shape) == 2 and attrs["axis"] == 0:
        return cx.emit("embedding", [cx.value(ids), cx.value(table)])
    return cx.emit("gather", [cx.value(table), cx.value(ids)], {"axis": attrs["axis"]})


def _emit_softmax(op: str) -> Callable[[Any, Any, dict[str, Any]], Any]:
    def emit(cx: Any, eqn: Any, attrs: dict[str, Any]) -> Any:
        return cx.emit(op, [cx.value(eqn.invars[0])], {"axis": attrs["axis"]})

    return emit


SHORTCUTS: dict[str, Shortcut] = {
    "relu": Shortcut("custom_jvp_call", "jax.nn.relu", _no_attrs, _unary("relu")),
    "relu6": Shortcut("custom_jvp_call", "jax.nn.relu6", _no_attrs,
                      _unary("clip", min=0.0, max=6.0)),
    "silu": Shortcut("jit", "jax.nn.silu", _no_attrs, _unary("silu")),
    "softplus": Shortcut("jit", "jax.nn.softplus", _no_attrs,
                         _unary("softplus", beta=1.0, threshold=20.0)),
    "mish": Shortcut("jit", "jax.nn.mish", _no_attrs, _unary("mish")),
    "hard_tanh": Shortcut("jit", "jax.nn.hard_tanh", _no_attrs,
                          _unary("clip", min=-1.0, max=1.0)),
    "hard_silu": Shortcut("jit", "jax.nn.hard_silu", _no_attrs, _unary("hardswish")),
    "hard_sigmoid": Shortcut("jit", "jax.nn.hard_sigmoid", _no_attrs,
                             _unary("hardsigmoid", alpha=1 / 6, beta=0.5)),
    "leaky_relu": Shortcut("jit", "jax.nn.leaky_relu", _slope(0.01), _unary("leaky_relu")),
    "elu": Shortcut("jit", "jax.nn.elu", _slope(1.0), _unary("elu")),
    "log_softmax": Shortcut("jit", "jax.nn.log_softmax", _reduce_axis,
                            _emit_softmax("log_softmax")),
    "_softmax": Shortcut("custom_jvp_call", "jax.nn.softmax", _reduce_axis,
                         _emit_softmax("softmax")),
    "clip": Shortcut("jit", "jax.numpy.clip", _clip_bounds, _unary("clip")),
    "tril": Shortcut("jit", "jax.numpy.tril", _trilu_k, _emit_trilu(False)),
    "triu": Shortcut("jit", "jax.numpy.triu", _trilu_k, _emit_trilu(True)),
    "_take": Shortcut("jit", "jax.numpy.take", _take_axis, _emit_take),
}


def _with_slope(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], Callable[..., Any]]:
    def make(attrs: dict[str, Any]) -> Callable[..., Any]:
        return (lambda x, a: fn(x, a)) if attrs["_explicit"] else fn

    return make


def _fixed(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], Callable[..., Any]]:
    return lambda attrs: fn


_TEMPLATE_FNS: dict[str, Callable[[dict[str, Any]], Callable[..., Any]]] = {
    "relu": _fixed(jax.nn.relu), "relu6": _fixed(jax.nn.relu6), "silu": _fixed(jax.nn.silu),
    "softplus": _fixed(jax.nn.softplus), "mish": _fixed(jax.nn.mish),
    "hard_tanh": _fixed(jax.nn.hard_tanh), "hard_silu": _fixed(jax.nn.hard_silu),
    "hard_sigmoid": _fixed(jax.nn.hard_sigmoid),
    "leaky_relu": _with_slope(jax.nn.leaky_relu), "elu": _with_slope(jax.nn.elu),
    "log_softmax": lambda a: functools.partial(jax.nn.log_softmax, axis=a["axis"]),
    "_softmax": lambda a: functools.partial(jax.nn.softmax, axis=a["axis"]),
    "softmax": lambda a: functools.partial(jax.nn.softmax, axis=a["axis"]),
    "gelu": lambda a: functools.partial(jax.nn.gelu, approximate=a["approximate"] == "tanh"),
    "clip": lambda a: lambda x, lo, hi: jnp.clip(x, lo, hi),
    "tril": lambda a: functools.partial(jnp.tril, k=a["k"]),
    "triu": lambda a: functools.partial(jnp.triu, k=a["k"]),
    "_take": lambda a: functools.partial(jnp.take, axis=a["axis"]),
}


def named_call(cx: Any) -> Any | None:
    """The canonical op for the current call equation if it is a known library function
    (verified against its template), else None (the caller inlines the body)."""
    eqn = cx.eqn
    name = call_name(eqn)
    shortcut = SHORTCUTS.get(name) if name else None
    if shortcut is None or eqn.primitive.name != shortcut.primitive:
        return None
    body_param = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    body = body_param.jaxpr if isinstance(body_param, ClosedJaxpr) else body_param
    if not isinstance(body, Jaxpr) or len(eqn.outvars) != 1:
        return None
    attrs = shortcut.attrs(cx, eqn, body)
    if attrs is None:
        return None
    template = _template(name, tuple(sorted(attrs.items())), _avals_key(eqn.invars))
    if template is None:
        return None
    call = [e for e in template.jaxpr.eqns if call_name(e) == name]
    if len(call) != 1 or _param_key(body_param) != _param_key(
            call[0].params.get("jaxpr", call[0].params.get("call_jaxpr"))):
        return None
    cx.set_origin(shortcut.origin)
    return shortcut.emit(cx, eqn, attrs)


def call_name(eqn: Any) -> str | None:
    """The function name a call equation carries: ``jit`` has it as a parameter, custom
    derivative calls in the debug info of their body."""
    name = eqn.params.get("name")
    if isinstance(name, str):
        return name
    body = eqn.params.get("call_jaxpr")
    info = getattr(getattr(body, "jaxpr", body), "debug_info", None)
    name = getattr(info, "func_name", None)
    return name if isinstance(name, str) else None


# --- inlined library functions (found from the traceback) --------------------------------
@dataclass(frozen=True)
class Inlined:
    """A library function JAX inlines (no call equation) that is a canonical op.

    Attributes:
        kind: the template name (``_TEMPLATE_FNS``) and the origin ``jax.nn.<kind>``.
        arity: how many array operands it reads.
        variants: the attribute sets to try, given the run of equations it produced.
        emit: adds the canonical node(s), given the operands in argument order.
        dtypes: the operand dtypes for which the canonical op is exact (None: all).
    """

    kind: str
    arity: int
    variants: Callable[[Sequence[Any]], list[dict[str, Any]]]
    emit: Callable[[Any, list[Any], dict[str, Any], Any], Any]
    dtypes: tuple[str, ...] | None = None


def _gelu_variants(run: Sequence[Any]) -> list[dict[str, Any]]:
    first = "tanh" if run[0].primitive.name == "integer_pow" else "none"
    return [{"approximate": first}, {"approximate": "none" if first == "tanh" else "tanh"}]


def _softmax_variants(run: Sequence[Any]) -> list[dict[str, Any]]:
    for e in run:
        if e.primitive.name == "reduce_max":
            axes = e.params["axes"]
            return [{"axis": int(axes[0])}] if len(axes) == 1 else []
    return []


def _attention_variants(run: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"causal": False}, {"causal": True}]


def _emit_one(op: str) -> Callable[[Any, list[Any], dict[str, Any], Any], Any]:
    def emit(cx: Any, args: list[Any], attrs: dict[str, Any], out: Any) -> Any:
        return cx.emit(op, [cx.value(args[0])], attrs, out=cx.aval(out))

    return emit


def _emit_attention(cx: Any, args: list[Any], attrs: dict[str, Any], out: Any) -> Any:
    """``jax.nn.dot_product_attention`` takes [batch, length, heads, head_dim]; canonical
    attention has the heads before the length."""
    q, k, v = (cx.value(a) for a in args)
    perm = (0, 2, 1, 3) if q.rank == 4 else (1, 0, 2)
    qt, kt, vt = (cx.emit("transpose", [t], {"perm": perm},
                          out=(tuple(t.shape[p] for p in perm), t.dtype)) for t in (q, k, v))
    shape, dtype = cx.aval(out)
    y = cx.emit("attention", [qt, kt, vt],
                {"scale": 1.0 / float(np.sqrt(q.shape[-1])), "causal": attrs["causal"],
                 "has_mask": False}, out=(tuple(shape[p] for p in perm), dtype))
    return cx.emit("transpose", [y], {"perm": perm}, out=(shape, dtype))


_INLINED: dict[Any, Inlined] = {}
for _fn, _spec in ((jax.nn.gelu, Inlined("gelu", 1, _gelu_variants, _emit_one("gelu"))),
                   (jax.nn.softmax, Inlined("softmax", 1, _softmax_variants,
                                            _emit_one("softmax"))),
                   # it always takes the softmax in float32: exact up to float32 inputs
                   (jax.nn.dot_product_attention,
                    Inlined("dot_product_attention", 3, _attention_variants, _emit_attention,
                            ("float32", "float16", "bfloat16")))):
    if hasattr(_fn, "__code__"):  # a plain Python function in this JAX version
        _INLINED[_fn.__code__] = _spec
_INLINED_IDS = frozenset(id(code) for code in _INLINED)
_TEMPLATE_FNS["dot_product_attention"] = lambda a: functools.partial(
    jax.nn.dot_product_attention, is_causal=a["causal"])


def match_window(cx: Any, eqns: Sequence[Any], i: int) -> int | None:
    """If ``eqns[i]`` starts a call of an inlined library function that is a canonical op
    (the outermost such function first), emit the op, bind its result and return the index
    after the call's equations; otherwise None."""
    tb = eqns[i].source_info.traceback
    if tb is None:
        return None
    codes, lastis = tb.raw_frames()
    if _INLINED_IDS.isdisjoint(map(id, codes)):
        return None
    for j in range(len(codes) - 1, -1, -1):
        spec = _INLINED.get(codes[j])
        if spec is None or not _starts_call(eqns[i - 1] if i else None, codes, lastis, j):
            continue
        end = _match(cx, eqns, i, spec, _run(eqns, i, codes, lastis, j))
        if end is not None:
            return end
    return None


def _caller(codes: list[Any], lastis: list[int], j: int) -> tuple[list[Any], list[int]]:
    return codes[j + 1:], lastis[j + 1:]


def _frame_of(eqn: Any, code: Any, caller: tuple[list[Any], list[int]]) -> int | None:
    """The bytecode offset in ``code`` of ``eqn``'s traceback, if it is the same call."""
    tb = eqn.source_info.traceback
    if tb is None:
        return None
    codes, lastis = tb.raw_frames()
    for j, c in enumerate(codes):
        if c is code:
            return lastis[j] if _caller(codes, lastis, j) == caller else None
    return None


def _starts_call(prev: Any, codes: list[Any], lastis: list[int], j: int) -> bool:
    """Whether the equation whose frames are ``codes`` begins a call of ``codes[j]``: the
    previous equation comes from elsewhere, or from a later point of an earlier call."""
    if prev is None:
        return True
    before = _frame_of(prev, codes[j], _caller(codes, lastis, j))
    return before is None or before > lastis[j]


def _run(eqns: Sequence[Any], i: int, codes: list[Any], lastis: list[int],
         j: int) -> list[Any]:
    """The equations from ``i`` on that come from the same call site of ``codes[j]``."""
    caller = _caller(codes, lastis, j)
    end = i + 1
    while end < len(eqns) and _frame_of(eqns[end], codes[j], caller) is not None:
        end += 1
    return list(eqns[i:end])


def _externals(run: Sequence[Any], count: int) -> list[Any]:
    """The first ``count`` variables ``run`` reads without computing them."""
    defined: set[Any] = set()
    found: list[Any] = []
    for e in run:
        for v in e.invars:
            if not isinstance(v, Literal) and v not in defined and v not in found:
                found.append(v)
                if len(found) == count:
                    return found
        defined.update(e.outvars)
    return found


def _match(cx: Any, eqns: Sequence[Any], i: int, spec: Inlined, run: list[Any]) -> int | None:
    externals = _externals(run, spec.arity)
    if len(externals) != spec.arity or (spec.dtypes is not None and any(
            str(v.aval.dtype) not in spec.dtypes for v in externals)):
        return None
    orders = [tuple(range(spec.arity))]
    if len({_avals_key([v]) for v in externals}) > 1:
        import itertools

        orders = list(itertools.permutations(range(spec.arity)))
    for attrs in spec.variants(run):
        for order in orders:
            args = [externals[k] for k in order]
            template = _template(spec.kind, tuple(sorted(attrs.items())), _avals_key(args))
            if template is None:
                continue
            t_eqns = template.jaxpr.eqns
            window = run[:len(t_eqns)]
            if len(window) != len(t_eqns) or not window:
                continue
            out = window[-1].outvars[0]
            if (fingerprint(window, [out]) != fingerprint(t_eqns, template.jaxpr.outvars)
                    or not _private(cx, window, out)):
                continue
            operands = _in_argument_order(template.jaxpr, t_eqns, externals)
            cx.set_origin(f"jax.nn.{spec.kind}")
            cx.env[out] = spec.emit(cx, operands, attrs, out)
            return i + len(window)
    return None


def _in_argument_order(jaxpr: Jaxpr, t_eqns: Sequence[Any], externals: list[Any]) -> list[Any]:
    """The window's operands in the function's argument order: the template's arguments and
    the window's operands correspond by order of first appearance."""
    rank = {v: k for k, v in enumerate(_externals(t_eqns, len(jaxpr.invars)))}
    return [externals[rank[v]] for v in jaxpr.invars]


def _private(cx: Any, window: Sequence[Any], out: Any) -> bool:
    """Whether every value the window computes, except ``out``, is read only inside it."""
    inside: dict[Any, int] = {}
    for e in window:
        for v in e.invars:
            if not isinstance(v, Literal):
                inside[v] = inside.get(v, 0) + 1
    for e in window:
        for v in e.outvars:
            if v is not out and cx.uses(v) != inside.get(v, 0):
                return False
    return True
