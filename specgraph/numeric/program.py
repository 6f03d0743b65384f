"""``NativeProgram``: a model's own program, run as written and observed at its values.

A frontend that keeps the program it traced (the ExportedProgram, the closed jaxpr...) gives
the TracedModel a ``NativeProgram``. ``observe`` runs that program with the framework's own
kernels on substituted weights and inputs, forward and, given output cotangents, backward,
and returns the native values the graph's ``natives`` name (``specgraph.ir.Native``), the
gradient of the loss at each of them, and the parameters' gradients. Everything crossing
this boundary is in the program's own layout and naming (parameters by the traced graph's
names); ``to_native`` / ``from_native`` convert from and to the canonical graph's layouts.
"""

from __future__ import annotations

import abc
import weakref
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgraph.ir import permuted
from specgraph.numeric.runner import Context, RunnerError

__all__ = ["NativeProgram", "Observation", "DeviceCopies", "where_in_memory", "native_weights",
           "native_inputs", "native_cotangents", "canonical_param_grads", "host_array"]


def host_array(array: Any) -> np.ndarray:
    """An observed array on the host: a NumPy array as it is, a framework's tensor (left on
    its device by the program) copied over, half precisions widened to float32."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "detach"):  # a PyTorch tensor
        t = array.detach()
        return (t.float() if t.dtype.is_floating_point and t.element_size() < 4
                else t).cpu().numpy()
    out = np.asarray(array)
    return out.astype(np.float32) if out.dtype.name in ("bfloat16", "float16") else out


@dataclass
class Observation:
    """What one run of a native program saw.

    Arrays are NumPy on the host; a program running on a GPU may leave them there as its
    framework's tensors (``host_array`` fetches one).

    Attributes:
        outputs: the program's outputs by graph output name (native layout).
        values: each requested native key's value (NumPy, native layout).
        grads: the loss's gradient at each requested key that a gradient reaches.
        param_grads: each parameter's gradient by graph parameter name (native layout).
        input_grads: each floating input's gradient by graph input name (native layout).
        single_reader: the observed keys whose value one op of the program alone reads (the
            gradient there is that op's whole share).
    """

    outputs: dict[str, np.ndarray]
    values: dict[Hashable, np.ndarray] = field(default_factory=dict)
    grads: dict[Hashable, np.ndarray] = field(default_factory=dict)
    param_grads: dict[str, np.ndarray] = field(default_factory=dict)
    input_grads: dict[str, np.ndarray] = field(default_factory=dict)
    single_reader: set[Hashable] = field(default_factory=set)


class NativeProgram(abc.ABC):
    """The program a frontend traced, runnable again with other weights and inputs.

    Attributes:
        framework: the framework that runs it (for messages).
        notes: what the program cannot run as the model runs it, one sentence each (the
            report shows them).
    """

    framework: str = ""
    notes: tuple[str, ...] = ()
    # parameters that are the model's state, not its weights (running statistics: PyTorch's
    # buffers, TF's non-trainable variables, Flax's batch_stats): no gradient by design
    state: frozenset[str] = frozenset()

    def require_float32(self, context: Context) -> None:
        """Refuse precisions the program cannot be run in yet, in one sentence."""
        if context.dtype != "float32":
            raise RunnerError(f"the {self.framework} program runs in float32 only; "
                              f"{context.dtype} needs the per-layer replay (leave out "
                              "--native)")

    def prepare(self, weights: Mapping[str, np.ndarray], context: Context) -> None:
        """Start, ahead of ``observe`` with these very ``weights`` (the same arrays), the
        work that depends on them alone, on a thread of its own while the other side's
        program runs (nothing by default)."""

    @abc.abstractmethod
    def observe(self, weights: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
                keys: Collection[Hashable], cotangents: Mapping[str, np.ndarray] | None,
                context: Context) -> Observation:
        """Run the program once, forward (and backward when ``cotangents`` are given, one
        per floating output by name: the loss is ``Σ <cotangent, output>``).

        Args:
            weights: parameter arrays by graph parameter name, native layout; a parameter
                left out keeps the model's own value.
            inputs: input arrays by graph input name, native layout.
            keys: the native values to observe (and the gradients at them).
            cotangents: output cotangents by output name, or None for forward only.
            context: device, mode (``eager`` runs the program op by op, ``compiled``
                compiles it whole) and precision.
        """


def _undo(array: np.ndarray, steps: tuple[tuple[str, tuple[int, ...]], ...],
          native_shape: tuple[int, ...] | None) -> np.ndarray:
    """``array`` laid out by ``steps`` from a native array, back in the native layout."""
    shapes: list[tuple[int, ...]] = []
    shape = native_shape
    for kind, arg in steps:
        shapes.append(shape if shape is not None else ())
        if shape is not None:
            shape = tuple(shape[p] for p in arg) if kind == "transpose" else tuple(arg)
    for (kind, arg), before in zip(reversed(steps), reversed(shapes)):
        if kind == "transpose":
            array = np.transpose(array, np.argsort(arg))
        else:
            array = np.reshape(array, before)
    return array  # a view where it can be: the framework copies it once, as it takes it


_SAMPLED = 64  # elements of an array read to tell an edit in place (``where_in_memory``)


def where_in_memory(array: Any) -> tuple[Any, tuple[Any, ...]]:
    """The object that owns ``array``'s memory and where in it ``array`` lies: two NumPy
    views of one buffer at the same place, shape, strides and dtype hold the same values
    (any other array stands for itself). The values of 64 elements spread over the array
    are part of where it lies, so that memory edited in place (a training step changes
    every weight) is not taken for what it held."""
    if not isinstance(array, np.ndarray):
        return array, ()
    owner = array
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    picks = np.linspace(0, array.size - 1, min(array.size, _SAMPLED)).astype(np.intp)
    return owner, (array.__array_interface__["data"][0], array.shape, array.strides,
                   array.dtype, array.flat[picks].tobytes())


class DeviceCopies:
    """Copies of the weights a program is given, on its device, by name: made once while
    views of the same memory are given (the comparison hands the same arrays to every seed
    and never changes them), as a model's weights stay on its device between training
    steps. What owns the memory is followed by a weak reference: a copy never keeps it
    alive, goes when it goes, and other memory is copied anew."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[weakref.ref[Any], tuple[Any, ...], Any, Any]] = {}

    def get(self, name: str, array: Any, device: Any, copy: Callable[[], Any]) -> Any:
        """The copy of ``array`` on ``device`` (``copy()`` makes one)."""
        owner, where = where_in_memory(array)
        kept = self._kept.get(name)
        if kept is not None and kept[0]() is owner and kept[1] == where and kept[2] == device:
            return kept[3]
        self._kept.pop(name, None)  # the last copy goes before the next is made
        value = copy()
        kept_ref = self._kept

        def forget(ref: weakref.ref[Any]) -> None:  # the weight is gone: so is its copy
            if kept_ref.get(name, (None,))[0] is ref:
                del kept_ref[name]

        try:
            self._kept[name] = (weakref.ref(owner, forget), where, device, value)
        except TypeError:  # an owner no weak reference can follow: copied each time
            pass
        return value

    def __contains__(self, name: str) -> bool:
        return name in self._kept

    def copy_of(self, name: str) -> Any:
        """The copy kept under ``name`` (for tests)."""
        return self._kept[name][3]


def _canonical_shape(traced: Any, name: str, native: tuple[int, ...] | None
                     ) -> tuple[int, ...] | None:
    """The shape of framework parameter ``name`` once its ``param_layouts`` steps ran."""
    shape = native
    for kind, arg in traced.param_layouts.get(name, ()):
        if shape is None:
            return None
        shape = tuple(shape[p] for p in arg) if kind == "transpose" else tuple(arg)
    return shape


def _blocks_by_whole(traced: Any) -> dict[str, list[tuple[str, int, int, int]]]:
    """Each framework parameter stored as pieces: (piece, axis, start, stop) of each."""
    blocks: dict[str, list[tuple[str, int, int, int]]] = {}
    for piece, (whole, axis, start, stop) in traced.param_pieces.items():
        blocks.setdefault(whole, []).append((piece, axis, start, stop))
    return blocks


def native_weights(traced: Any, weights: Mapping[str, np.ndarray],
                   native_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Canonical ``weights`` of ``traced``'s graph in the program's layouts
    (``param_layouts`` undone; ``native_shapes`` gives each native shape for reshapes); the
    pieces of a parameter (``param_pieces``) joined into it, where all of them are given
    (else the program keeps its own); a sum of parameters (``param_sums``) given to its
    terms (``_terms_of_sum``), which may be pieces in turn."""
    out: dict[str, np.ndarray] = {}
    pieces, blocks = traced.param_pieces, _blocks_by_whole(traced)
    parts: dict[str, list[tuple[int, np.ndarray]]] = {}

    def put(name: str, array: np.ndarray) -> None:
        steps = tuple(traced.param_layouts.get(name, ()))
        if name in traced.param_sums:
            for term, value in _terms_of_sum(traced, name, array).items():
                put(term, value)
            return
        if name not in pieces:
            out[name] = _undo(array, steps, native_shapes.get(name))
            return
        whole, axis, start, stop = pieces[name]
        full = _canonical_shape(traced, whole, native_shapes.get(whole))
        before = None if full is None else full[:axis] + (stop - start,) + full[axis + 1:]
        parts.setdefault(whole, []).append((start, _undo(array, steps, before)))
        if len(parts[whole]) == len(blocks[whole]) and whole not in weights:
            # all given (else the program keeps its own; an inference program's one
            # initializer read whole and split is given whole: ``_fold_param_splits``)
            joined = np.concatenate([a for _, a in sorted(parts[whole], key=lambda g: g[0])],
                                    axis=axis)
            put(whole, joined)

    for name, array in weights.items():
        put(name, np.asarray(array))
    return {k: np.ascontiguousarray(v) if k in blocks else v for k, v in out.items()}


def _terms_of_sum(traced: Any, name: str, array: np.ndarray) -> dict[str, np.ndarray]:
    """The parameters whose sum is the canonical ``name`` (``param_sums``), each in its own
    canonical layout, holding ``array``: the model's own where ``array`` is its own sum,
    else the first term ``array`` and the others zeros (``b_ih`` the bias, ``b_hh``
    nothing)."""
    terms = traced.param_sums[name]
    vector = _undo(array, tuple(traced.param_layouts.get(name, ())),
                   (array.size,)).reshape(-1)
    own = sum(np.asarray(held).reshape(-1) for _, held in terms)
    mine = np.array_equal(own, vector)
    out = {}
    for i, (term, held) in enumerate(terms):
        held = np.asarray(held)
        value = held if mine else (vector if i == 0 else np.zeros_like(vector))
        out[term] = value.reshape(held.shape)
    return out


def native_inputs(traced: Any, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Canonical inputs as the program takes them (channels-last where it is)."""
    return {k: np.ascontiguousarray(np.transpose(a, np.argsort(traced.input_layouts[k])))
            if k in traced.input_layouts else np.asarray(a) for k, a in inputs.items()}


def native_cotangents(traced: Any, cts: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Output cotangents in canonical layout as the program's outputs are laid out."""
    return {k: np.ascontiguousarray(np.transpose(a, traced.output_layouts[k]))
            if k in traced.output_layouts else np.asarray(a) for k, a in cts.items()}


def canonical_param_grads(traced: Any, grads: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Native parameter gradients laid out like the canonical parameters: a parameter stored
    as pieces (``param_pieces``) gives each piece its block; a sum of parameters
    (``param_sums``) gets its first term's gradient, which every term has."""
    pieces, sums = traced.param_pieces, traced.param_sums
    blocks = _blocks_by_whole(traced)
    found: dict[str, np.ndarray | None] = {}

    def laid(name: str, g: np.ndarray) -> np.ndarray:
        for kind, arg in traced.param_layouts.get(name, ()):
            g = permuted(g, arg) if kind == "transpose" else g.reshape(tuple(arg))
        return g

    def grad_of(name: str) -> np.ndarray | None:
        if name in found:
            return found[name]
        g: np.ndarray | None = None
        if name in sums:
            given = [t for t in (grad_of(term) for term, _ in sums[name]) if t is not None]
            g = laid(name, np.asarray(given[0]).reshape(-1)) if given else None
        elif name in pieces:
            whole, axis, start, stop = pieces[name]
            full = grad_of(whole)
            if full is not None:
                g = laid(name, full[(slice(None),) * axis + (slice(start, stop),)])
        elif name in grads:
            g = laid(name, grads[name])
        found[name] = g
        return g

    terms = {t for ts in sums.values() for t, _ in ts}
    names = [n for n in (*grads, *pieces, *sums) if n not in blocks and n not in terms]
    out = {}
    for name in dict.fromkeys(names):
        g = grad_of(name)
        if g is not None:
            out[name] = g
    return out
