"""The JAX model's own program: its closed jaxpr, run again with JAX's primitives and observed.

``JaxProgram.observe`` evaluates the jaxpr the frontend traced equation by equation, binding
each primitive as ``jax.core.eval_jaxpr`` does, so what runs is the model's own formula (a
Flax LayerNorm's E[x²]−E[x]² stays that), not a canonical kernel. A key
(``specgraph.frontends.jax.walk``) names one equation's output by the path of equation
indices through the calls the walk inlined; the evaluation goes into a call only where a key
lies inside it and binds every other equation whole:

* a ``jit`` body is evaluated under ``jax.jit`` of its own (one XLA computation, as the
  model's own call is), other calls (``closed_call``, ``remat``...) in line;
* a ``custom_jvp_call`` / ``custom_vjp_call`` is bound whole, so its outputs and the
  gradients through it come from the model's own rules; the values inside it are observed
  by evaluating its body once more on the same operands, outside differentiation: they have
  no gradient;
* a ``cond`` is bound whole: values inside its branches are not observed.

Gradients. Each observed floating value gets a zero probe added (``x + p``, ``p`` negative
zeros: ``x + (-0.0)`` is ``x`` bit for bit, signed zeros included); ``jax.vjp`` of
(parameters, probes) -> outputs with the output cotangents gives the parameters' gradients
and, at each probe, the gradient at that value. A value or parameter the outputs do not depend
on differentiably (cut off by ``stop_gradient`` or integer operations,
``specgraph.frontends.jax.reach``) gets no probe and no gradient: JAX's zeros there are no
gradient of the model's. Eager mode runs all of this op by op, as
``apply_fn(params, *inputs)`` runs without ``jax.jit``; compiled mode runs it as one
``jax.jit`` program, compiled once per set of keys (and shapes). On a GPU the observed values
and gradients stay there, as JAX arrays.
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr, DropVar, Jaxpr, Literal

from specgraph.frontends.jax.reach import reaching
from specgraph.frontends.jax.runner import MATMUL_PRECISION, jax_device
from specgraph.frontends.jax.walk import CALL_JAXPR_PARAMS, SEALED_BODIES, to_numpy
from specgraph.numeric.program import DeviceCopies, NativeProgram, Observation, where_in_memory
from specgraph.numeric.runner import Context, RunnerError

__all__ = ["JaxProgram"]

Key = tuple[int, ...]
_COMPILED_CALLS = frozenset({"jit", "pjit"})  # bodies that run as one XLA computation
_PRECISIONS = ("float32", "tf32")  # the program keeps its own dtypes: no other storage


def _inexact(dtype: Any) -> bool:
    return bool(jnp.issubdtype(dtype, jnp.inexact))


def _body(eqn: Any) -> tuple[Jaxpr, Sequence[Any]]:
    """The jaxpr a call equation runs and its constants."""
    body = eqn.params[CALL_JAXPR_PARAMS[eqn.primitive.name]]
    if isinstance(body, ClosedJaxpr):
        return body.jaxpr, body.consts
    return body, ()


# primitives whose precision=None means "the default of the config the code was traced
# under": JAX reads jax_default_matmul_precision when lax.dot_general is called, not when
# its equation is bound again, so a rebound equation would take the device's default (TF32
# on GPUs) whatever the context asks for
_PRECISION_PRIMITIVES = frozenset({"dot_general", "conv_general_dilated"})


def with_precision(jaxpr: Jaxpr, precision: Any) -> Jaxpr:
    """``jaxpr`` with every matmul and convolution that leaves its precision to the default
    (nested bodies included) given ``precision``, as code traced under
    ``jax.default_matmul_precision`` gets it; ``jaxpr`` itself where none does."""
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        params = {name: _param_with_precision(value, precision)
                  for name, value in eqn.params.items()}
        if eqn.primitive.name in _PRECISION_PRIMITIVES and params.get("precision") is None:
            params["precision"] = (precision, precision)
        touched = any(params[k] is not eqn.params[k] for k in params)
        eqns.append(eqn.replace(params=params) if touched else eqn)
        changed = changed or touched
    return jaxpr.replace(eqns=eqns) if changed else jaxpr


def _param_with_precision(value: Any, precision: Any) -> Any:
    if isinstance(value, ClosedJaxpr):
        inner = with_precision(value.jaxpr, precision)
        return value if inner is value.jaxpr else ClosedJaxpr(inner, value.consts)
    if isinstance(value, Jaxpr):
        return with_precision(value, precision)
    if isinstance(value, tuple) and value and all(isinstance(x, (Jaxpr, ClosedJaxpr))
                                                  for x in value):
        new = tuple(_param_with_precision(x, precision) for x in value)
        return value if all(a is b for a, b in zip(new, value)) else new
    return value


def _keeper(device: Any) -> Callable[[Any], Any]:
    """How observed arrays are kept: NumPy on the CPU (no copy), JAX arrays on a GPU, where
    the comparison reads them."""
    return to_numpy if device.platform == "cpu" else (lambda x: x)


def _equal(a: np.ndarray, b: np.ndarray, piece: int = 1 << 16) -> bool:
    """Whether two arrays of one shape and dtype hold the same bits, compared piece by piece
    (no temporary as large as they are). Two layouts (a transposed view of a checkpoint's
    kernel against the program's own) are walked in ``b``'s memory order, in blocks over
    its two outer axes, so that both blocks stay in cache while they are compared."""
    try:
        x, y = a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")
    except (TypeError, ValueError):  # no unsigned type of that size (complex128)
        return bool(np.array_equal(a, b))
    x, y = x.squeeze(), y.squeeze()  # a 1x1 convolution's kernel is a matrix
    if x.ndim == 0:
        return bool(x == y)
    if x.flags.c_contiguous and y.flags.c_contiguous:
        x, y = x.reshape(-1), y.reshape(-1)
    else:
        order = sorted(range(y.ndim), key=lambda k: -abs(y.strides[k]))  # outermost first
        x, y = x.transpose(order), y.transpose(order)
    if x.ndim == 1:
        return all(np.array_equal(x[i:i + piece], y[i:i + piece])
                   for i in range(0, x.size, piece))
    inner = max(1, math.prod(x.shape[2:]))
    step = max(1, math.isqrt(max(1, piece // inner)))  # block side over the outer two axes
    return all(np.array_equal(x[i:i + step, j:j + step], y[i:i + step, j:j + step])
               for i in range(0, x.shape[0], step) for j in range(0, x.shape[1], step))


def _bind(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    """``eqn``'s primitive applied to ``invals``, as ``jax.core.eval_jaxpr`` applies it."""
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns: Sequence[Any] = ()
    if isinstance(params, tuple):  # JAX before 0.7: (subfuns, params)
        subfuns, params = params
    ctx = getattr(eqn, "ctx", None)
    with ctx.manager if ctx is not None else contextlib.nullcontext():
        out = eqn.primitive.bind(*subfuns, *invals, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


class _Evaluation:
    """One evaluation of a jaxpr that records the values at ``keys`` (adding the probe of
    each that has one) into ``seen``.

    Args:
        program: the program (for its compiled call bodies).
        keys: the keys to observe at or below the jaxpr evaluated.
        probes: zero probes by key, for the observed values that get a gradient.
    """

    def __init__(self, program: JaxProgram, keys: frozenset[Key],
                 probes: Mapping[Key, Any]) -> None:
        self.program = program
        self.keys = keys
        self.inside = frozenset(k[:j] for k in keys for j in range(1, len(k) - 1))
        self.probes = probes
        self.seen: dict[Key, Any] = {}

    def run(self, jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[Any],
            path: Key) -> list[Any]:
        env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
        env.update(zip(jaxpr.invars, args))

        def read(v: Any) -> Any:
            return v.val if isinstance(v, Literal) else env[v]

        for i, eqn in enumerate(jaxpr.eqns):
            here = (*path, i)
            invals = [read(v) for v in eqn.invars]
            outs = self.call(eqn, invals, here) if here in self.inside else _bind(eqn, invals)
            for k, (var, val) in enumerate(zip(eqn.outvars, outs)):
                if isinstance(var, DropVar):
                    continue
                key = (*here, k)
                if key in self.keys:
                    if key in self.probes:
                        val = val + self.probes[key]
                    self.seen[key] = val
                env[var] = val
        return [read(v) for v in jaxpr.outvars]

    def call(self, eqn: Any, invals: list[Any], here: Key) -> list[Any]:
        """A call equation with keys inside (see the module docstring)."""
        name = eqn.primitive.name
        inner = frozenset(k for k in self.keys if k[:len(here)] == here)
        if name in SEALED_BODIES:
            outs = _bind(eqn, invals)
            held = [jax.lax.stop_gradient(x) if _inexact(jnp.result_type(x)) else x
                    for x in invals]
            jaxpr, consts = _body(eqn)
            side = _Evaluation(self.program, inner, {})
            side.run(jaxpr, consts, held, here)
            self.seen.update(side.seen)
            return outs
        probes = {k: p for k, p in self.probes.items() if k in inner}
        if name in _COMPILED_CALLS:
            outs, seen = self.program.compiled_body(eqn, here, inner)(invals, probes)
        else:
            outs, seen = self.program.evaluate(eqn, here, inner, invals, probes)
        self.seen.update(seen)
        return outs


class JaxProgram(NativeProgram):
    """A closed jaxpr of ``apply(params, *inputs)`` with the names the traced graph gives
    its parameters (the leaves of ``params``, in order), inputs and outputs.

    Args:
        closed: the closed jaxpr; its invars are the parameters' leaves, then the inputs.
        param_names: the graph name of each parameter leaf.
        param_arrays: each leaf's own array (kept where ``observe`` is given no weight).
        input_names: graph input names, in the order of the jaxpr's inputs.
        output_names: graph output names, in the order of the jaxpr's outputs.
        trained: the parameters whose gradients ``observe`` returns (the graph's).
    """

    framework = "jax"

    def __init__(self, closed: ClosedJaxpr, param_names: Sequence[str],
                 param_arrays: Sequence[Any], input_names: Sequence[str],
                 output_names: Sequence[str], trained: Collection[str]) -> None:
        self.closed = closed
        self.param_names = list(param_names)
        self.param_arrays = list(param_arrays)
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        invars = closed.jaxpr.invars
        self.param_avals = [v.aval for v in invars[:len(self.param_names)]]
        self.input_avals = [v.aval for v in invars[len(self.param_names):]]
        self.floating_outputs = [i for i, v in enumerate(closed.jaxpr.outvars)
                                 if _inexact(v.aval.dtype)]
        # what a gradient of the outputs reaches: a value or parameter cut off from them
        # (stop_gradient, integer operations) has no gradient, not a zero one
        self.reach = reaching(closed.jaxpr)
        self.state = frozenset(name for name in self.param_names if name not in trained)
        self.trained = [i for i, (name, aval) in enumerate(zip(self.param_names,
                                                               self.param_avals))
                        if name in trained and _inexact(aval.dtype) and self.reach.inputs[i]]
        self._programs: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self._bodies: dict[tuple[Key, frozenset[Key]], Callable[..., Any]] = {}
        self._located: dict[Hashable, tuple[Any, bool] | None] = {}
        self._zeros: dict[tuple[frozenset[Key], Any], dict[Key, Any]] = {}
        self._single: dict[Key, bool] = {}
        self._precise: dict[str, ClosedJaxpr] = {}
        # whether a given weight holds the bits of one of the model's own arrays, by the
        # memory the given array views (alive: each comparison views the same arrays, and
        # none changes them) and that own array (a tied weight is given to several)
        self._same: dict[tuple[Any, ...], tuple[weakref.ref[Any], Any, bool]] = {}
        self._preparing: threading.Thread | None = None
        self._copies = DeviceCopies()  # given weights on a GPU

    # --- keys ------------------------------------------------------------------------------
    def locate(self, key: Hashable) -> tuple[Any, bool] | None:
        """The jaxpr variable ``key`` names and whether it lies in a custom-rule body
        (observed without a gradient); None where the key names nothing observable."""
        if key not in self._located:
            self._located[key] = self._locate(key)
        return self._located[key]

    def _locate(self, key: Hashable) -> tuple[Any, bool] | None:
        if not (isinstance(key, tuple) and len(key) >= 2
                and all(type(k) is int and k >= 0 for k in key)):
            return None
        jaxpr, sealed = self.closed.jaxpr, False
        for index in key[:-2]:
            if index >= len(jaxpr.eqns):
                return None
            eqn = jaxpr.eqns[index]
            name = eqn.primitive.name
            if name not in CALL_JAXPR_PARAMS:  # a cond's branch among them
                return None
            sealed = sealed or name in SEALED_BODIES
            jaxpr = _body(eqn)[0]
        index, out = key[-2:]
        if index >= len(jaxpr.eqns) or out >= len(jaxpr.eqns[index].outvars):
            return None
        var = jaxpr.eqns[index].outvars[out]
        return None if isinstance(var, DropVar) else (var, sealed)

    # --- bodies of calls with keys inside ---------------------------------------------------
    def compiled_body(self, eqn: Any, here: Key, keys: frozenset[Key]) -> Callable[..., Any]:
        """``(operands, probes) -> (outputs, observed)`` of a ``jit`` call's body, under
        ``jax.jit`` (one per call site and keys, so eager runs compile it once)."""
        memo = (here, keys, id(eqn))  # the equation of the program run (its precisions)
        if memo not in self._bodies:
            def body(invals: list[Any], probes: dict[Key, Any]) -> tuple[list[Any], dict]:
                return self.evaluate(eqn, here, keys, invals, probes)

            self._bodies[memo] = jax.jit(body)
        return self._bodies[memo]

    def evaluate(self, eqn: Any, here: Key, keys: frozenset[Key], invals: Sequence[Any],
                 probes: Mapping[Key, Any]) -> tuple[list[Any], dict[Key, Any]]:
        """A call's body evaluated in line: its outputs and the values seen inside."""
        jaxpr, consts = _body(eqn)
        inner = _Evaluation(self, keys, probes)
        outs = inner.run(jaxpr, consts, invals, here)
        return outs, inner.seen

    # --- the program -------------------------------------------------------------------------
    def _function(self, keys: frozenset[Key], backward: bool, mode: str,
                  closed: ClosedJaxpr) -> Callable[..., Any]:
        """(params, inputs, probes[, cotangents]) -> (outputs, observed[, grads]) for these
        keys, evaluating ``closed`` (the program, its precisions set for the device), under
        ``jax.jit`` in compiled mode (cached)."""
        memo = (keys, backward, mode, id(closed))
        if memo in self._programs:
            return self._programs[memo]
        trained, floating = self.trained, self.floating_outputs

        def forward(params: list[Any], inputs: list[Any], probes: dict[Key, Any]
                    ) -> tuple[list[Any], dict[Key, Any]]:
            evaluation = _Evaluation(self, keys, probes)
            outs = evaluation.run(closed.jaxpr, closed.consts, [*params, *inputs], ())
            return outs, evaluation.seen

        fed = self._fed()

        def gradients(params: list[Any], inputs: list[Any], probes: dict[Key, Any],
                      cts: list[Any]) -> tuple[list[Any], dict[Key, Any], list[Any], dict,
                                               list[Any]]:
            def loss_side(wrt: list[Any], wrt_in: list[Any], probed: dict[Key, Any]
                          ) -> tuple[list[Any], Any]:
                full, ins = list(params), list(inputs)
                for i, w in zip(trained, wrt):
                    full[i] = w
                for i, x in zip(fed, wrt_in):
                    ins[i] = x
                outs, seen = forward(full, ins, probed)
                return [outs[i] for i in floating], (outs, seen)

            _, pull, (outs, seen) = jax.vjp(loss_side, [params[i] for i in trained],
                                            [inputs[i] for i in fed], probes, has_aux=True)
            param_grads, input_grads, probe_grads = pull(cts)
            return outs, seen, param_grads, probe_grads, input_grads

        fn = gradients if backward else forward
        if mode == "compiled":
            fn = jax.jit(fn)
        self._programs[memo] = fn
        return fn

    def observe(self, weights: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
                keys: Collection[Hashable], cotangents: Mapping[str, np.ndarray] | None,
                context: Context) -> Observation:
        if context.dtype not in _PRECISIONS:
            raise RunnerError(
                f"the JAX program runs in its own dtypes only (float32, or tf32 matmuls); "
                f"{context.dtype} is not supported yet: compare without --native")
        missing = [name for name in self.input_names if name not in inputs]
        if missing:
            raise RunnerError(f"the JAX program needs inputs {missing}; got {sorted(inputs)}")
        observed = frozenset(k for k in keys if self.locate(k) is not None)
        device = jax_device(context.device)
        if self._preparing is not None:  # what ``prepare`` found out is there to use
            self._preparing.join()
            self._preparing = None
        with jax.default_device(device), \
                jax.default_matmul_precision(MATMUL_PRECISION[context.dtype]):
            params = jax.device_put(
                [self._param(weights, name, aval, own, device)
                 for name, aval, own in zip(self.param_names, self.param_avals,
                                            self.param_arrays)], device)
            args = jax.device_put([np.asarray(inputs[name]).astype(aval.dtype, copy=False)
                                   for name, aval in zip(self.input_names, self.input_avals)],
                                  device)
            backward = cotangents is not None
            probes = self._probes(observed, device) if backward else {}
            fn = self._function(observed, backward, context.mode,
                                self._for_device(device, context.dtype))
            if not backward:
                outs, seen = fn(params, args, probes)
                return self._observation(outs, seen, _keeper(device))
            cts = self._cotangents(cotangents)
            outs, seen, param_grads, probe_grads, input_grads = fn(params, args, probes, cts)
        keep = _keeper(device)
        obs = self._observation(outs, seen, keep)
        obs.param_grads = {self.param_names[i]: keep(g)
                           for i, g in zip(self.trained, param_grads)}
        obs.grads = {k: keep(g) for k, g in probe_grads.items()}
        fed = self._fed()
        obs.input_grads = {self.input_names[i]: keep(g) for i, g in zip(fed, input_grads)}
        return obs

    def _for_device(self, device: Any, dtype: str) -> ClosedJaxpr:
        """The program as it runs on ``device`` in precision ``dtype``: on a GPU, matmuls and
        convolutions the model leaves at the default precision get the one the context
        asks for (float32: full float32, not the GPU's TF32); on the CPU, as traced."""
        name = MATMUL_PRECISION[dtype]
        if device.platform == "cpu" or name == "default":
            return self.closed
        if name not in self._precise:
            jaxpr = with_precision(self.closed.jaxpr, jax.lax.Precision(name))
            self._precise[name] = (self.closed if jaxpr is self.closed.jaxpr
                                   else ClosedJaxpr(jaxpr, self.closed.consts))
        return self._precise[name]

    def prepare(self, weights: Mapping[str, np.ndarray], context: Context) -> None:
        """On the CPU, find out on a thread of its own which given weights hold the model's
        own bits (``_param``), while the other side's program runs."""
        if jax_device(context.device).platform != "cpu" or self._preparing is not None:
            return

        def check() -> None:
            try:
                for name, own in zip(self.param_names, self.param_arrays):
                    if name in weights:
                        self._holds_own(weights[name], own)
            except Exception:  # noqa: BLE001  (``observe`` finds out again, and says why)
                return

        self._preparing = threading.Thread(target=check, name="specgraph-jax-weights",
                                           daemon=True)
        self._preparing.start()

    def _holds_own(self, given: Any, own: Any) -> bool:
        """Whether the given weight holds the bits of the model's own array ``own`` (a CPU
        JAX array of its dtype and shape), remembered by the memory the given array views
        (``where_in_memory``: each comparison views the same weights anew)."""
        owner, where = where_in_memory(given)
        key = (id(owner), where, id(own))
        kept = self._same.get(key)
        if kept is not None and kept[0]() is owner and kept[1] is own:
            return kept[2]
        data = np.asarray(given)
        same = isinstance(own, jax.Array) and data.dtype == own.dtype and \
            data.shape == own.shape and {d.platform for d in own.devices()} == {"cpu"} and \
            _equal(data, np.asarray(own))

        def forget(ref: weakref.ref[Any]) -> None:  # the array is gone: so is what is known
            if self._same.get(key, (None,))[0] is ref:
                del self._same[key]

        try:
            self._same[key] = (weakref.ref(owner, forget), own, same)
        except TypeError:  # not an array one can refer to weakly: found out each time
            pass
        return same

    def _param(self, weights: Mapping[str, np.ndarray], name: str, aval: Any, own: Any,
               device: Any) -> Any:
        """The array parameter ``name`` runs with: the weight given, or the model's own
        where none is given or, on the CPU, where the given one equals it bit for bit (two
        ports of one checkpoint: nothing is copied)."""
        if name not in weights:
            return own
        if device.platform == "cpu":
            if self._holds_own(weights[name], own):
                return own
            return np.asarray(weights[name]).astype(aval.dtype, copy=False)
        given = weights[name]  # on a GPU: copied there once (``DeviceCopies``)
        return self._copies.get(name, given, device, lambda: jax.device_put(
            np.asarray(given).astype(aval.dtype, copy=False), device))

    def _fed(self) -> list[int]:
        """The inputs whose gradients are taken: floating ones a gradient reaches."""
        first = len(self.param_names)
        return [i for i, aval in enumerate(self.input_avals)
                if _inexact(aval.dtype) and self.reach.inputs[first + i]]

    def _probes(self, keys: frozenset[Key], device: Any) -> dict[Key, Any]:
        """A probe of negative zeros for each floating value at ``keys`` outside custom
        rules that a gradient reaches (where one is taken); made once per keys and
        device."""
        memo = (keys, device)
        if memo not in self._zeros:
            probes, shared = {}, {}  # one array of zeros per shape and dtype, shared by
            for key in keys:         # the probes (each still its own leaf of the vjp)
                var, sealed = self.locate(key)  # type: ignore[misc]
                if not sealed and _inexact(var.aval.dtype) and key in self.reach.keys:
                    kind = (var.aval.shape, var.aval.dtype)
                    if kind not in shared:
                        shared[kind] = jnp.full(var.aval.shape, -0.0, var.aval.dtype)
                    probes[key] = shared[kind]
            self._zeros[memo] = probes
        return self._zeros[memo]

    def _cotangents(self, cotangents: Mapping[str, np.ndarray]) -> list[Any]:
        """One cotangent per floating output, in its dtype (zeros where none is given)."""
        cts = []
        for i in self.floating_outputs:
            aval = self.closed.jaxpr.outvars[i].aval
            ct = cotangents.get(self.output_names[i])
            cts.append(jnp.zeros(aval.shape, aval.dtype) if ct is None
                       else jnp.asarray(np.asarray(ct).astype(aval.dtype)))
        return cts

    def _observation(self, outs: Sequence[Any], seen: Mapping[Key, Any],
                     keep: Callable[[Any], Any]) -> Observation:
        return Observation(outputs={name: to_numpy(o) for name, o in zip(self.output_names, outs)},
                           values={k: keep(v) for k, v in seen.items()},
                           single_reader={k for k in seen if self._single_reader(k)})

    def _single_reader(self, key: Key) -> bool:
        """Whether one equation of its own jaxpr alone reads the value at ``key`` (a value
        a body returns is read outside it: not known to be single)."""
        if key not in self._single:
            self._single[key] = self._count_readers(key) == 1
        return self._single[key]

    def _count_readers(self, key: Key) -> int:
        jaxpr = self.closed.jaxpr
        for index in key[:-2]:
            jaxpr = _body(jaxpr.eqns[index])[0]
        var = jaxpr.eqns[key[-2]].outvars[key[-1]]
        if any(v is var for v in jaxpr.outvars):
            return 0
        return sum(1 for eqn in jaxpr.eqns for v in eqn.invars if v is var)
