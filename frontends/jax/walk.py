"""The jaxpr walk of the JAX frontend: one converter call per equation, nested calls inlined.

``JaxprConverter`` holds the state every converter in the op tables uses: the IR value of
each jaxpr variable (``value``), constants known at trace time (``known``), parameters in
their canonical layout (``weight``: a layout is a permutation of the native axes), and
``emit`` / ``opaque`` to add nodes with the equation's scope, source and origin.

Each IR value bound to an equation's output is recorded as the native value it equals
(``GraphBuilder.native``) under a key that names that output as one occurrence in the
program: the path of equation indices through the inlined calls, then the output index
(``(12, 3, 0)``: output 0 of equation 3 of the body called by equation 12 of the top-level
jaxpr). ``specgraph.frontends.jax.program`` observes the program at these keys.
"""

from __future__ import annotations

import math
import os
import sysconfig
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from specgraph.errors import TraceError
from specgraph.frontends._common.converter import BaseConverter, Step, inverse_perm
from specgraph.frontends._common.sources import display_path
from specgraph.frontends._common.table import Converter
from specgraph.frontends.jax import fusion
from specgraph.ir import DTYPES, Graph, Value, prune

__all__ = ["JaxprConverter", "Folder", "LayoutHint", "SCOPE_MARK", "CALL_JAXPR_PARAMS",
           "SEALED_BODIES", "source", "dtype_name", "to_numpy"]

# A NumPy version of a primitive that plumbs small constants (index arithmetic, pad values):
# its result is known at trace time, for converters that need a static value.
Folder = Callable[..., Any]
_FOLD_LIMIT = 64  # elements; larger constant results stay graph computations only
_EVALUATE_LIMIT = 1 << 16  # elements: an unknown primitive run on known inputs
# The canonical layout (a permutation) of an equation's operands that are weights, by
# operand index: a parameter read there is stored in that layout (conv kernels as OIHW).
LayoutHint = Callable[[Any], dict[int, tuple[int, ...]]]

# A scope pushed by the frontend itself (Flax module paths) starts with this mark; the scope
# of an equation is the innermost marked path plus any user scopes opened inside it.
SCOPE_MARK = "\u00a7"

# Call-like primitives whose body is inlined (after the shortcuts in _jax_fusion had a look).
CALL_JAXPR_PARAMS = {
    "jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr", "remat2": "jaxpr", "checkpoint": "jaxpr",
    "remat": "jaxpr", "named_call": "call_jaxpr",
}
# Bodies the program runs as a whole (custom differentiation rules; a branch of a cond):
# a value inside one is observed without a gradient or not at all, so the call's own
# outputs keep the key of the calling equation (see ``JaxprConverter.record``).
SEALED_BODIES = frozenset({"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
                           "cond"})


def _internal_dirs() -> tuple[str, ...]:
    import importlib.util

    dirs = [os.path.dirname(jax.__file__), os.path.dirname(os.path.abspath(__file__)),
            sysconfig.get_paths()["stdlib"]]
    for name in ("jaxlib", "flax"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            dirs.append(os.path.dirname(spec.origin))
    return tuple(os.path.join(d, "") for d in dirs)


_INTERNAL = _internal_dirs()
_CODE_IS_INTERNAL: dict[Any, bool] = {}
_DTYPE_NAMES: dict[Any, str | None] = {}


def dtype_name(dtype: Any) -> str | None:
    """The IR dtype name of a NumPy/JAX dtype, or None if the IR has no such dtype."""
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):
        pass
    try:
        name: str | None = np.dtype(dtype).name
    except TypeError:  # extended dtypes such as PRNG keys
        name = None
    name = name if name in DTYPES else None
    try:
        _DTYPE_NAMES[dtype] = name
    except TypeError:
        pass
    return name


class _Param:
    """A model parameter: a leaf of the params pytree, created in the graph on first use."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Const:
    """A constant known at trace time (a closed-over array or a literal passed to a call)."""

    __slots__ = ("array", "value")

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.value: Value | None = None


class JaxprConverter(BaseConverter):
    """Walks a closed jaxpr and builds the IR (see the module docstring).

    Parameters are keyed by their index among the leaves of the params pytree; a layout is
    a permutation of the native axes, None the native layout.
    """

    NATIVE = None

    def __init__(self, reference: str, param_names: Sequence[str],
                 param_arrays: Sequence[Any], input_names: Sequence[str], *,
                 converters: Mapping[str, Converter], folders: Mapping[str, Folder],
                 param_layouts: Mapping[str, LayoutHint]) -> None:
        super().__init__(reference)
        self.converters = converters
        self.folders = folders
        self.param_layouts = param_layouts
        self.param_names = list(param_names)
        self.param_arrays = list(param_arrays)
        self.input_names = list(input_names)
        self.scalars: dict[tuple[str, bytes], Value] = {}
        self.scope_cache: dict[Any, str] = {}
        self.sources: dict[tuple[Any, int], str] = {}  # per trace: relative to the cwd
        self.uses_cache: dict[int, dict[Any, int]] = {}
        self.env: dict[Any, Any] = {}
        self.static: dict[Any, np.ndarray] = {}
        self.prefix: Any = None
        self.eqn: Any = None
        self.eqns: Sequence[Any] = ()
        self.jaxpr: Jaxpr | None = None
        self.outer_source = ""
        self.index = 0
        self.skip_next = False
        self.path: tuple[int, ...] = ()  # equation indices of the calls being walked
        self.sealed = 0  # how many of them are SEALED_BODIES
        self.unrolled = 0  # how many loops (``scan``) the walk is inside, unrolled
        self.natives: dict[Value, tuple[int, tuple[int, ...]]] = {}  # (sealed, key)

    # --- the walk ------------------------------------------------------------------------
    def convert(self, closed: ClosedJaxpr, output_names: Sequence[str]) -> tuple[Graph, dict]:
        jaxpr = closed.jaxpr
        n_params = len(self.param_names)
        args: list[Any] = [_Param(i) for i in range(n_params)]
        for name, var in zip(self.input_names, jaxpr.invars[n_params:]):
            args.append(self.b.input(name, var.aval.shape, self.dtype(var.aval, f"input {name!r}")))
        consts = [_Const(np.asarray(c)) for c in closed.consts]
        used: set[int] = set()
        layouts: dict[int, tuple[int, ...]] = {}
        _scan_params(jaxpr, {v: i for i, v in enumerate(jaxpr.invars[:n_params])}, used, layouts,
                     self.param_layouts)
        for index in sorted(used):  # in the order of the params pytree
            self.param(index, layouts.get(index))
        outs = self.walk(jaxpr, consts, args, None)
        for name, out in zip(output_names, outs):
            self.b.output(name, self.resolve(out))
        for value, (_, key) in self.natives.items():
            self.b.native(value, key)
        graph = prune(self.b.build())
        order = {name: i for i, name in enumerate(self.param_names)}
        params = dict(sorted(graph.params.items(), key=lambda kv: order[kv[0]]))
        if list(params) != list(graph.params):
            graph = graph.replace(params=params)
        return graph, self.weights(graph)

    def walk(self, jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[Any],
             prefix: Any) -> list[Any]:
        """Convert ``jaxpr`` with its constvars and invars bound to ``consts`` and ``args``;
        returns what its outvars are bound to."""
        caller = self.eqn
        saved = (self.env, self.static, self.prefix, self.eqns, self.index, self.jaxpr,
                 self.outer_source, self.skip_next, self.path, self.sealed)
        if caller is not None:
            self.outer_source = self.where()["source"]
            self.path = (*self.path, self.index)
            self.sealed += caller.primitive.name in SEALED_BODIES
        env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
        env.update(zip(jaxpr.invars, args))
        self.env, self.static, self.prefix = env, {}, prefix
        self.eqns, self.jaxpr = jaxpr.eqns, jaxpr
        try:
            eqns = jaxpr.eqns
            i = 0
            while i < len(eqns):
                i = self.step(eqns, i)
            return [self.atom(v) for v in jaxpr.outvars]
        finally:
            (self.env, self.static, self.prefix, self.eqns, self.index, self.jaxpr,
             self.outer_source, self.skip_next, self.path, self.sealed) = saved
            self.eqn, self._where = caller, None

    def step(self, eqns: Sequence[Any], i: int) -> int:
        eqn = eqns[i]
        self.eqn, self.index, self._where, self.skip_next = eqn, i, None, False
        name = eqn.primitive.name
        fused = fusion.match_window(self, eqns, i)
        if fused is not None:
            self.record(fused - 1)
            return fused
        if name in CALL_JAXPR_PARAMS:
            outs = fusion.named_call(self) or self.inline(eqn)
        else:
            converter = self.converters.get(name)
            if converter is not None:
                outs = converter(self, eqn)
            else:
                outs = self.evaluate(eqn) or self.opaque()
        self.bind(eqn.outvars, outs)
        self.record(i + 1 if self.skip_next else i)  # a fused pair stands for the second
        if name in self.folders:
            self.fold(eqn)
        return i + 2 if self.skip_next else i + 1

    def record(self, index: int) -> None:
        """Record the outputs of equation ``index`` of the jaxpr being walked as natives of
        the IR values bound to them (where the shapes agree). A value bound to several
        outputs keeps the first key, except that a key outside a sealed body beats one
        inside (a custom-rule call's output is the call's, where its gradient is seen)."""
        if self.unrolled:  # a loop's body runs once per step in the program: no one value
            return
        eqn = self.eqns[index]
        for k, var in enumerate(eqn.outvars):
            value = self.env.get(var)
            if not isinstance(value, Value) or value.shape != tuple(var.aval.shape):
                continue
            held = self.natives.get(value)
            if held is None or self.sealed < held[0]:
                self.natives[value] = (self.sealed, (*self.path, index, k))

    def fold(self, eqn: Any) -> None:
        """Record the value of ``eqn``'s output when its inputs are known and it is small."""
        values = [self.known(v) for v in eqn.invars]
        out = eqn.outvars[0]
        if any(v is None for v in values) or math.prod(out.aval.shape) > _FOLD_LIMIT:
            return
        try:
            result = self.folders[eqn.primitive.name](*values, **eqn.params)
        except (TypeError, ValueError):  # a parameter NumPy has no version of: not known
            return
        self.static[out] = np.asarray(result).astype(out.aval.dtype)

    def evaluate(self, eqn: Any) -> list[_Const] | None:
        """A primitive no converter knows whose inputs are all known at trace time (a
        ``rem`` or ``scatter`` in a mask built from constants), run by JAX: its outputs
        are constants. None where an input is not known or an output is large."""
        arrays = []
        for v in eqn.invars:
            array = self.known(v)
            if array is None and isinstance(self.env.get(v), Value):
                array = self.b.constant_of(self.env[v], limit=_EVALUATE_LIMIT)
            if array is None:
                return None
            arrays.append(array)
        if any(math.prod(v.aval.shape) > _EVALUATE_LIMIT for v in eqn.outvars):
            return None
        try:
            with jax.default_device(jax.devices("cpu")[0]):
                result = eqn.primitive.bind(*arrays, **eqn.params)
        except Exception:  # noqa: BLE001  (what JAX cannot run here stays opaque)
            return None
        results = result if eqn.primitive.multiple_results else [result]
        if any(jax.dtypes.issubdtype(getattr(r, "dtype", None), jax.dtypes.extended)
               for r in results):
            return None  # a PRNG key (``nn.RNN``'s carry initializer draws one): no array
        return [_Const(np.asarray(r)) for r in results]

    def bind(self, outvars: Sequence[Any], outs: Any) -> None:
        if isinstance(outs, (Value, _Param, _Const)):
            outs = (outs,)
        for var, out in zip(outvars, outs):
            self.env[var] = out

    def inline(self, eqn: Any) -> list[Any]:
        """The outputs of a call equation, its body converted in place."""
        body = eqn.params[CALL_JAXPR_PARAMS[eqn.primitive.name]]
        return self.call_body(body, [self.atom(v) for v in eqn.invars], eqn)

    def call_body(self, body: ClosedJaxpr | Jaxpr, args: Sequence[Any], eqn: Any) -> list[Any]:
        """Convert ``body`` (called by ``eqn``) on ``args``; returns its outputs."""
        if isinstance(body, ClosedJaxpr):
            jaxpr, consts = body.jaxpr, [_Const(np.asarray(c)) for c in body.consts]
        else:
            jaxpr, consts = body, []
        return self.walk(jaxpr, consts, args, self.name_stack(eqn))

    def fuse_next(self, value: Value) -> None:
        """Bind the next equation's output to ``value`` and skip it (a converter fused it)."""
        self.env[self.eqns[self.index + 1].outvars[0]] = value
        self.skip_next = True

    def next_eqn(self) -> Any | None:
        return self.eqns[self.index + 1] if self.index + 1 < len(self.eqns) else None

    def uses(self, var: Any) -> int:
        """How many times ``var`` is read in the jaxpr being walked (outputs count)."""
        counts = self.uses_cache.get(id(self.jaxpr))
        if counts is None:
            counts = {}
            for e in self.jaxpr.eqns:
                for v in e.invars:
                    if not isinstance(v, Literal):
                        counts[v] = counts.get(v, 0) + 1
            for v in self.jaxpr.outvars:
                if not isinstance(v, Literal):
                    counts[v] = counts.get(v, 0) + 1
            self.uses_cache[id(self.jaxpr)] = counts
        return counts.get(var, 0)

    # --- values --------------------------------------------------------------------------
    def atom(self, v: Any) -> Any:
        """What a jaxpr atom is bound to: a Value, a _Param or a _Const (literals too)."""
        if isinstance(v, Literal):
            return _Const(np.asarray(v.val, dtype=v.aval.dtype))
        if v in self.static:  # known inside the call too; the value already in the graph
            const = _Const(self.static[v])
            const.value = self.resolve(self.env[v])
            return const
        return self.env[v]

    def value(self, v: Any) -> Value:
        """The IR value of an atom (parameters in their native layout)."""
        if isinstance(v, Literal):
            return self.constant(np.asarray(v.val, dtype=v.aval.dtype))
        return self.resolve(self.env[v])

    def resolve(self, bound: Any) -> Value:
        """The IR value of what an atom is bound to (creating constants on first use)."""
        if isinstance(bound, Value):
            return bound
        if isinstance(bound, _Param):
            return self.param(bound.index, None)
        if bound.value is None:
            bound.value = self.constant(bound.array)
        return bound.value

    def known(self, v: Any) -> np.ndarray | None:
        """The value of an atom when it is known at trace time (literals, constants)."""
        if isinstance(v, Literal):
            return np.asarray(v.val, dtype=v.aval.dtype)
        bound = self.env.get(v)
        if isinstance(bound, _Const):
            return bound.array
        return self.static.get(v)

    def is_param(self, v: Any) -> bool:
        return not isinstance(v, Literal) and isinstance(self.env.get(v), _Param)

    def constant(self, array: np.ndarray) -> Value:
        dtype = self.dtype_of(array.dtype, "a constant")
        if dtype == "bfloat16":
            array = array.astype(np.float32)
        if array.ndim == 0:
            key = (dtype, array.tobytes())
            if key not in self.scalars:
                self.scalars[key] = self.b.constant(array, dtype)
            return self.scalars[key]
        return self.b.constant(array, dtype)

    def scalar(self, number: float, dtype: str) -> Value:
        """A 0-d constant of IR dtype ``dtype``."""
        np_dtype = np.float32 if dtype == "bfloat16" else np.dtype(dtype)
        return self.constant(np.asarray(number, dtype=np_dtype))

    def weight(self, v: Any, perm: tuple[int, ...] | None) -> Value:
        """A weight atom as ``transpose(native, perm)``: a parameter is stored in the layout
        of its first use (see ``convert``; weights are converted to it), other uses and
        computed values are transposed."""
        bound = self.env[v]
        if isinstance(bound, _Param):
            return self.param(bound.index, perm)
        value = self.resolve(bound)
        if perm is None or perm == tuple(range(len(perm))):
            return value
        shape = tuple(value.shape[p] for p in perm)
        return self.emit("transpose", [value], {"perm": perm}, out=(shape, value.dtype))

    # --- the current equation and the parameters, for the shared converter base ----------
    def locate(self) -> dict[str, str]:
        eqn = self.eqn
        return {"scope": self.scope(eqn),
                "source": source(eqn, self.sources) or self.outer_source,
                "origin": eqn.primitive.name}

    def outs(self) -> list[tuple[tuple[int, ...], str]]:
        return [self.aval(v) for v in self.eqn.outvars]

    def param_spec(self, key: int) -> tuple[str, tuple[int, ...], str]:
        array, name = self.param_arrays[key], self.param_names[key]
        return name, tuple(np.shape(array)), self.dtype_of(array.dtype, f"parameter {name!r}")

    def native_array(self, key: int) -> np.ndarray:
        return to_numpy(self.param_arrays[key])

    def layout_steps(self, layout: Hashable, shape: tuple[int, ...]) -> tuple[Step, ...]:
        perm = layout
        if not perm or perm == tuple(range(len(shape))):
            return ()
        return (("transpose", perm),)

    def relayout_steps(self, shape: tuple[int, ...], have: Hashable, want: Hashable
                       ) -> tuple[Step, ...]:
        """One transpose from permutation ``have`` to permutation ``want``."""
        identity = tuple(range(len(shape)))
        if have == want or (want is None and have == identity):
            return ()
        inv = inverse_perm(have or identity)
        return (("transpose", tuple(inv[q] for q in (want or identity))),)

    # --- emitting ------------------------------------------------------------------------
    def aval(self, v: Any) -> tuple[tuple[int, ...], str]:
        return tuple(int(s) for s in v.aval.shape), self.dtype(v.aval, "a value")

    def out(self, index: int = 0) -> tuple[tuple[int, ...], str]:
        return self.aval(self.eqn.outvars[index])

    def opaque(self, target: str | None = None) -> tuple:
        """The current equation as an ``opaque`` node that keeps the primitive's name."""
        inputs = [self.value(v) for v in self.eqn.invars]
        return self.emit_opaque(inputs, target=target or self.eqn.primitive.name)

    def where(self, origin: str | None = None) -> dict[str, str]:
        """Where the current equation sits, with ``origin`` in place of its own if given."""
        where = super().where()
        return where if origin is None else {**where, "origin": origin}

    def set_origin(self, origin: str) -> None:
        self._where = self.where(origin)

    def name_stack(self, eqn: Any) -> Any:
        stack = eqn.source_info.name_stack
        return stack if self.prefix is None else self.prefix + stack

    def scope(self, eqn: Any) -> str:
        stack = self.name_stack(eqn)
        scope = self.scope_cache.get(stack)
        if scope is None:
            scope = self.scope_cache[stack] = _scope_text(stack)
        return scope

    def dtype(self, aval: Any, what: str) -> str:
        return self.dtype_of(aval.dtype, what)

    def dtype_of(self, dtype: Any, what: str) -> str:
        name = dtype_name(dtype)
        if name is None:
            where = (f"{self.eqn.primitive.name} at {self.scope(self.eqn) or '<model>'}"
                     if self.eqn is not None else "the model's signature")
            if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
                raise TraceError(
                    f"{self.reference}: {what} of {where} is a random key ({dtype}), which "
                    "specgraph does not trace; trace the model in inference mode (no random "
                    "numbers drawn); a recurrent layer (Flax's nn.RNN, which draws a key for "
                    "its initial carry) is not supported yet")
            raise TraceError(
                f"{self.reference}: {what} of {where} has dtype {dtype}, which specgraph does "
                "not support; trace the model in inference mode (no random numbers) with "
                "float, int or bool arrays"
            )
        return name


def _scan_params(jaxpr: Jaxpr, bound: dict[Any, int], used: set[int],
                 layouts: dict[int, tuple[int, ...]], hints: Mapping[str, LayoutHint]) -> None:
    """Which parameters (``bound``: variable -> parameter index) ``jaxpr`` reads, nested
    calls included, and the layout each is wanted in (``hints``; first one wins)."""
    for e in jaxpr.eqns:
        reads = [(k, bound[v]) for k, v in enumerate(e.invars)
                 if not isinstance(v, Literal) and v in bound]
        if not reads:
            continue
        hint = hints.get(e.primitive.name)
        perms = hint(e) if hint is not None else {}
        for k, index in reads:
            used.add(index)
            if k in perms:
                layouts.setdefault(index, perms[k])
        key = CALL_JAXPR_PARAMS.get(e.primitive.name)
        body = e.params.get(key) if key else None
        inner = getattr(body, "jaxpr", body)
        if isinstance(inner, Jaxpr):
            _scan_params(inner, {inner.invars[k]: index for k, index in reads}, used, layouts,
                         hints)
    used.update(bound[v] for v in jaxpr.outvars if not isinstance(v, Literal) and v in bound)


def _scope_text(stack: Any) -> str:
    parts: list[str] = []
    for item in stack.stack:
        name = getattr(item, "name", None)
        if type(item).__name__ != "Scope" or not isinstance(name, str):
            continue  # a transform (jvp, vmap, ...) wraps the names, it is not one
        if name.startswith(SCOPE_MARK):
            path = name[len(SCOPE_MARK):]
            parts = [path] if path else []
        elif name and "->" not in name:  # jnp.einsum names its call by its subscripts
            parts.append(name.replace("/", "."))
    return ".".join(parts)


def source(eqn: Any, cache: dict[tuple[Any, int], str]) -> str:
    """``file:line`` of the innermost user frame that created ``eqn`` ("" if none; relative
    to the working directory when inside it, as ``cache`` holds them)."""
    tb = eqn.source_info.traceback
    if tb is None:
        return ""
    codes, lastis = tb.raw_frames()
    for code, lasti in zip(codes, lastis):
        internal = _CODE_IS_INTERNAL.get(code)
        if internal is None:
            internal = _CODE_IS_INTERNAL[code] = _is_internal(code.co_filename)
        if internal:
            continue
        key = (code, lasti)
        text = cache.get(key)
        if text is None:
            line = tb.code_addr2line(code, lasti)
            text = cache[key] = f"{display_path(code.co_filename)}:{line}"
        return text
    return ""


def _is_internal(filename: str) -> bool:
    return filename.startswith(_INTERNAL) or filename.startswith("<frozen")


def to_numpy(array: Any) -> np.ndarray:
    """A NumPy array of a JAX/NumPy array (bfloat16 widened to float32)."""
    out = np.asarray(array)
    if out.dtype.name == "bfloat16":
        out = out.astype(np.float32)
    return out

