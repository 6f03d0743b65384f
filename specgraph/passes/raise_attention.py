"""Raise attention written out by hand (q·kᵀ, scale, mask, softmax, ·v) to ``attention``
with its scale and causality. A constant mask, however written (a select, an added
``finfo.min``, TF GPT-2's ``w·b − 1e4·(1 − b)``), or an attention op's constant mask input,
that keeps exactly the keys j <= i becomes ``causal``; one that keeps every key (zeros
added, an all-ones attention mask) goes away; the constant masks before any softmax over
the keys become one additive mask of 0 and -inf, and attention raised with another constant
mask (a band, a diagonal) takes it as that one mask input; a constant multiplied into q or k
before the attention (through the reshapes and transposes that split heads) folds into its scale
(exact: the scores are bilinear in q and k). A key-padding mask built from an input
(``input_masks``: HF's added ``(1 - m)·finfo.min``, ``masked_fill(m == 0, fill)``, Flax's
``where``) becomes the attention's mask operand in one form, ``where(K, 0, fill)`` added;
where the rows that keep no key are zeroed after the softmax (Keras' masked ``Softmax``, an
exported ``IsNaN``·``Where`` after a -inf mask), the boolean K, as SDPA's. Scores selected
away with a fill that drowns them on their way into a softmax over the keys, by a mask of
any making (DeBERTa's outer product of the padding mask, which no attention is raised
over), take one fill, the dtype's lowest: TensorFlow's DeBERTa fills with -inf where
PyTorch's fills with ``finfo.min``, and the softmax is the same wherever a row keeps a key.

Requires: softmax already raised (RaiseActivationsPass). Ensures: each rewrite is proved on
random q, k, v in float64 (``regions.agrees``; with an input's mask, ``input_masks.proved``
on random ones and zeros for it); a different scale, mask or fill does not match.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.drowned import drowning
from specgraph.passes.input_masks import (DROWN, LOWEST, MASK_OPS, FedMask, InputMask, drowns,
                                          fed_mask, is_select, keep_mask, proved, read_mask,
                                          select, smallest, written_as)
from specgraph.passes.regions import agrees, region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseAttentionPass"]


def _peel_scores(rw: Rewriter, s: Value, steps: int = 8
                 ) -> tuple[Value, list[float], list[tuple[Node, Value]], list[FedMask],
                            list[Value]] | None:
    """Walk back from the softmax input to the q·kᵀ product: its scalar scales, the nodes
    masking it with constants (added, subtracted, multiplied in, or selected), last first,
    those masking it with a mask built from an input (``fed_mask``), and the computed
    tensors added to it (a learned relative-position bias, as BEiT's and Data2Vec's ports
    add it where PyTorch hands it to SDPA as ``attn_mask``)."""
    scales: list[float] = []
    masks: list[tuple[Node, Value]] = []  # each with the scores it reads
    fed: list[FedMask] = []
    biases: list[Value] = []
    for step in range(steps):
        node = rw.producer(s)
        if node is None:
            return None
        if node.op == "matmul":
            return s, scales, masks, fed, biases
        consts = [rw.constant_value(v) is not None for v in node.inputs]
        scalar = [rw.scalar(v) is not None for v in node.inputs]
        if node.op == "maximum" and any(scalar) and \
                next(rw.scalar(v) for v in node.inputs if rw.scalar(v) is not None) <= DROWN:
            # scores clamped from below at a drowning fill (XGLM's and OPT's
            # ``max(scores, finfo.min)``): a masked key stays drowned, a kept one untouched
            s = next(v for v in node.inputs if rw.scalar(v) is None)
        elif node.op in ("mul", "div") and any(scalar):
            c = next(rw.scalar(v) for v in node.inputs if rw.scalar(v) is not None)
            scales.append(c if node.op == "mul" else 1.0 / c)
            s = next(v for v in node.inputs if rw.scalar(v) is None)
        elif node.op in ("add", "mul") and consts.count(True) == 1:
            s = node.inputs[consts.index(False)]
            masks.append((node, s))
        elif node.op == "sub" and consts == [False, True]:
            s = node.inputs[0]
            masks.append((node, s))
        elif node.op == "where" and consts in ([True, False, True], [True, True, False]):
            s = node.inputs[consts.index(False)]
            masks.append((node, s))
        elif (found := fed_mask(rw, node)) is not None:
            fed.append(found)
            s = found.scores
        elif node.op == "add" and not any(consts) and len(node.inputs) == 2:
            # a computed term added to the scores: the operand the walk goes on through to
            # q·kᵀ is the scores, the other the bias
            for j in (0, 1):
                rest = _peel_scores(rw, node.inputs[j], steps - step - 1)
                if rest is not None:
                    product, more_scales, more_masks, more_fed, more_biases = rest
                    return (product, scales + more_scales, masks + more_masks,
                            fed + more_fed, biases + [node.inputs[1 - j]] + more_biases)
            return None
        else:
            return None
    return None


def _scaled(rw: Rewriter, value: Value) -> tuple[Value, float]:
    """``value`` without the scalar multiplications and divisions that produced it."""
    scale = 1.0
    node = rw.producer(value)
    while node is not None and node.op in ("mul", "div"):
        consts = [rw.scalar(v) for v in node.inputs]
        if node.op == "div" and consts[1] is not None:
            scale /= consts[1]
            value = node.inputs[0]
        elif node.op == "mul" and any(c is not None for c in consts):
            scale *= next(c for c in consts if c is not None)
            value = next(v for v, c in zip(node.inputs, consts) if c is None)
        else:
            break
        node = rw.producer(value)
    return value, scale


def _operand(rw: Rewriter, value: Value) -> tuple[Value, tuple[int, ...] | None, float]:
    """An operand of q·kᵀ as (base, transpose to apply to it or None, scalar folded in)."""
    node = rw.producer(value)
    if node is not None and node.op == "transpose":
        base, scale = _scaled(rw, node.inputs[0])
        if scale != 1.0:
            return base, node.attrs["perm"], scale
        return value, None, 1.0
    base, scale = _scaled(rw, value)
    return base, None, scale


def _qk(rw: Rewriter, product: Value):
    """q and kᵀ of the scores product, each as (base, perm or None), and the folded scale."""
    mm = rw.producer(product)
    q, q_perm, q_scale = _operand(rw, mm.inputs[0])
    kt, kt_perm, k_scale = _operand(rw, mm.inputs[1])
    return q, q_perm, kt, kt_perm, q_scale * k_scale


def _causal(mask: np.ndarray) -> bool:
    """Whether the additive ``mask`` [..., L, S] keeps j <= i and drowns the rest (-inf, or
    at most -1e4, whose exp vanishes next to the kept scores)."""
    m = np.asarray(mask)
    if m.ndim < 2:
        return False
    length, source = m.shape[-2:]
    keep = np.tril(np.ones((length, source), dtype=bool))
    return bool(np.all(m[..., ~keep] <= -1e4) and np.all(m[..., keep] == 0))


def _mask_effect(rw: Rewriter, shape: tuple[int, ...], masks: list[tuple[Node, Value]]
                 ) -> np.ndarray | None:
    """What the mask nodes make of zero scores: the additive mask they amount to."""
    effect = np.zeros(shape)
    for node, scores in masks[::-1]:
        args = [effect if v is scores else rw.constant_value(v) for v in node.inputs]
        if any(a is None for a in args):
            return None
        with np.errstate(all="ignore"):
            effect = np.asarray(get_spec(node.op).reference(*args, **node.attrs), float)
    return effect


@dataclass(frozen=True)
class _Match:
    """Attention written out: q and kᵀ (each a base and the transpose to apply), v, the
    scale, causality, the mask built from an input (if any), whether the rows that keep no
    key are zeroed (a boolean mask), the boolean masks zeroing them, whether a ``where``
    after the softmax tries to (``after``), and another constant mask (additive, 0/-inf)."""

    q: Value
    q_perm: tuple[int, ...] | None
    kt: Value
    kt_perm: tuple[int, ...] | None
    v: Value
    scale: float
    causal: bool
    fed: FedMask | None = None
    zeroed: bool = False
    zeroing: tuple[tuple[Value, InputMask], ...] = ()
    after: bool = False
    mask: np.ndarray | None = None
    bias: Value | None = None
    band: np.ndarray | None = None  # a constant keep pattern and-ed into the input's mask


def _zeroed_softmax(rw: Rewriter, p: Value
                    ) -> tuple[Value, tuple[tuple[Value, InputMask], ...]] | None:
    """``p`` as a softmax with the rows that keep no key zeroed after it: Keras' masked
    ``where(C, softmax, 0)`` (C a mask built from an input) or the ONNX export of SDPA's
    boolean mask, ``where(isnan(softmax), 0, softmax)``; the softmax output and the masks."""
    node = rw.producer(p)
    if node is None or node.op != "where":
        return None
    cond, a, b = node.inputs
    if rw.uniform(b) == 0.0 and rw.constant_value(a) is None:
        mask = read_mask(rw, cond) if cond.dtype == "bool" else None
        return (a, ((cond, mask),)) if mask is not None and mask.on is True and \
            mask.fixed is None else None
    test = rw.producer(cond)
    if rw.uniform(a) == 0.0 and test is not None and test.op == "not_equal" and \
            test.inputs[0] is b and test.inputs[1] is b:
        return b, ()
    return None


def _pattern(rw: Rewriter, node: Node) -> _Match | None:
    p, v = node.inputs
    zeroing, zeroed = (), False
    if (found := _zeroed_softmax(rw, p)) is not None:
        (p, zeroing), zeroed = found, True
    sm = rw.producer(p)
    if sm is None or sm.op != "softmax" or sm.attrs["axis"] != p.rank - 1:
        return None
    peeled = _peel_scores(rw, sm.inputs[0])
    if peeled is None:
        return None
    product, scales, masks, fed, biases = peeled
    if len(fed) > 1 or len(biases) > 1 or (biases and (fed or masks or zeroed)):
        return None  # a bias beside other masks: kept as written
    # what the constant masks make of zero scores (read once, for both uses below)
    effect = _mask_effect(rw, product.shape, masks) if masks or (zeroed and not fed) else None
    if zeroed and not fed:  # constant masks alone: no NaN to zero unless a row keeps no key
        if effect is None or not np.all(np.any(np.isfinite(effect), axis=-1)):
            return None
        zeroed = False
    if zeroed and not zeroing and not np.isneginf([fed[0].on, fed[0].off]).any():
        zeroed = False  # no NaN to zero: a finite mask (PyTorch's exporter adds finfo.min)
    q, q_perm, kt, kt_perm, qk_scale = _qk(rw, product)
    causal, mask, band = False, None, None
    if fed and fed[0].mask.fixed is not None:  # a causal mask and-ed into the input's
        fixed = fed[0].mask.fixed
        if masks:  # and a constant one applied too (GPT-Neo selects with its causal
            # buffer, then adds its 4D mask): what both keep must be the causal pattern
            if effect is None or np.any((effect != 0) & (effect > DROWN)):
                return None
            fixed = np.broadcast_to(fixed, product.shape) & np.broadcast_to(
                effect == 0, product.shape)
        causal = _fixed_causal(fixed, product.shape)
        if zeroing:
            return None
        if not causal:  # a band (GPT-Neo's local attention): kept in the mask operand, for
            # a mask that drowns the keys it masks (a boolean one, and-ed with the band)
            if not drowns(fed[0].on, fed[0].off):
                return None
            band = smallest(np.broadcast_to(fixed, product.shape))
        masks = []  # proved below with the region
    if masks:  # proved below with the region: here only whether it can be causal
        causal = effect is not None and _causal(effect)
        if not causal and effect is not None and np.any(effect):
            mask = _keys_kept(effect)  # another constant mask: one additive 0/-inf input
            if mask is None or fed:
                return None  # with a mask built from an input too: kept as written
    return _Match(q, q_perm, kt, kt_perm, v, qk_scale * math.prod(scales), causal,
                  fed[0] if fed else None, zeroed, zeroing, found is not None, mask,
                  biases[0] if biases else None, band)


def _fixed_causal(fixed: np.ndarray, shape: tuple[int, ...]) -> bool:
    """Whether a constant keep pattern and-ed into an input's mask is the causal one
    (keeps exactly the keys j <= i) over scores of ``shape``."""
    try:
        keep = np.broadcast_to(fixed, shape)
    except ValueError:
        return False
    return _causal(np.where(keep, 0.0, -np.inf))


def _keys_kept(effect: np.ndarray) -> np.ndarray | None:
    """The additive 0/-inf mask, as small as its repetitions allow, that a constant mask of
    zeros and drowning values amounts to; None where a row keeps no key (its softmax then
    depends on the fill) or a value neither keeps nor drowns its score."""
    if np.any((effect != 0) & (effect > DROWN)):
        return None
    keep = effect == 0
    if not np.all(np.any(keep, axis=-1)):
        return None
    return smallest(np.where(keep, 0.0, -np.inf))


def _apply(array: np.ndarray, perm: tuple[int, ...] | None) -> np.ndarray:
    return array if perm is None else np.transpose(array, perm)


def _heads(y: Value, q: tuple, kt: tuple, v: Value) -> dict[Value, tuple[int, ...]] | None:
    """Where q, kᵀ and v hold the output's leading (batch, head) axes: attention computes
    each of those slices on its own (the transposes the candidate applies moved them)."""
    lead = tuple(range(y.rank - 2))
    (qb, q_perm), (kb, kt_perm) = q, kt
    if any(t.rank != y.rank for t in (qb, kb, v)):
        return None
    batch: dict[Value, tuple[int, ...]] = {y: lead}
    for t, dims in ((v, lead), (qb, tuple((q_perm or lead)[j] for j in lead)),
                    (kb, tuple((kt_perm or lead)[j] for j in lead))):
        if batch.setdefault(t, dims) != dims:
            return None  # one tensor read with its axes in two places
    return batch


def _constant_mask(rw: Rewriter, node: Node) -> bool:
    """attention with a constant mask that is the causal one (PyTorch's GPT-2 keeps its
    lower-triangular buffer), or one that keeps every key (an all-ones attention mask
    turned into zeros): attention with ``causal`` and no mask, or no mask at all, proved on
    random q, k, v."""
    if not node.attrs["has_mask"]:
        return False
    data = rw.constant_value(node.inputs[3])
    if data is None:
        return False
    data = np.asarray(data)
    additive = np.where(data, 0.0, -np.inf) if data.dtype == bool else data
    if not np.any(additive):
        causal = node.attrs["causal"]
    elif not node.attrs["causal"] and _causal(additive):
        causal = True
    else:
        return False
    y, (q, k, v) = node.outputs[0], node.inputs[:3]
    rw.keep(node)  # the root must be visible to the region walk
    spec = get_spec("attention")
    attrs = spec.normalize_attrs({**node.attrs, "causal": causal, "has_mask": False})
    if len({q, k, v}) == 3 and agrees(
            rw, [node], y, [q, k, v], lambda env: spec.reference(env[q], env[k], env[v],
                                                                  **attrs),
            claim=("causal-mask", attrs)):
        rw.replace(y, rw.emit("attention", [q, k, v], attrs, like=node, shape=y.shape))
    return True


_LAYOUT = ("reshape", "transpose")


def _mask_chain(rw: Rewriter, s: Value) -> tuple[Value, list[tuple[Node, Value]]]:
    """Walk back from a softmax input through the nodes masking it with constants (added,
    selected, subtracted), last first: the unmasked scores and the mask nodes."""
    masks: list[tuple[Node, Value]] = []
    while (node := rw.producer(s)) is not None and rw.uses(s) == 1:
        consts = [rw.constant_value(v) is not None for v in node.inputs]
        if node.op == "add" and consts.count(True) == 1 and \
                rw.scalar(node.inputs[consts.index(True)]) is None:
            nxt = node.inputs[consts.index(False)]
        elif node.op == "sub" and consts == [False, True]:
            nxt = node.inputs[0]
        elif node.op == "where" and consts in ([True, False, True], [True, True, False]):
            nxt = node.inputs[consts.index(False)]  # masked_fill selects the scores third
        else:
            break
        masks.append((node, nxt))
        s = nxt
    return s, masks


def _canonical_mask(rw: Rewriter, node: Node) -> bool:
    """softmax(scores masked by constants, however written: ``where(keep, s, finfo.min)``,
    ``s + bias`` with -1e4, -1e9 or -inf, both) is softmax(s + M) with M the one additive
    mask of 0 and -inf, kept as small as its repetitions allow: equal where every row keeps
    a key, proved on random scores."""
    if node.attrs["axis"] != node.inputs[0].rank - 1:
        return False
    scores, masks = _mask_chain(rw, node.inputs[0])
    if not masks:
        return False
    effect = _mask_effect(rw, scores.shape, masks)
    if effect is None or np.any((effect != 0) & (effect > DROWN)):
        return False
    keep = effect == 0
    if not np.all(np.any(keep, axis=-1)):
        return False  # a row with no key left: its softmax depends on the values used
    canonical = smallest(np.where(keep, 0.0, -np.inf))
    if len(masks) == 1 and masks[0][0].op == "add":
        current = rw.constant_value(next(v for v in masks[0][0].inputs
                                         if rw.constant_value(v) is not None))
        if np.array_equal(np.asarray(current, dtype=np.float64), canonical):
            return False
    y = node.outputs[0]
    rw.keep(node)  # the root must be visible to the region walk
    nodes = region(rw, y, [scores])
    if nodes is None:
        return True
    axis = node.attrs["axis"]

    def candidate(env):
        z = env[scores] + canonical
        z = z - np.max(z, axis=axis, keepdims=True)
        e = np.exp(z)
        return e / np.sum(e, axis=axis, keepdims=True)

    if not agrees(rw, nodes, y, [scores], candidate, claim=("canonical-mask",
                                                             canonical.tobytes(),
                                                             canonical.shape)):
        return True
    mask = rw.constant(canonical.astype(np.float32 if scores.dtype == "bfloat16"
                                        else scores.dtype), scores.dtype)
    added = rw.emit("add", [scores, mask], like=masks[0][0], shape=scores.shape)
    rw.replace(y, rw.emit("softmax", [added], dict(node.attrs), like=node, shape=y.shape))
    return True


def _scaled_input(rw: Rewriter, value: Value) -> tuple[Value, list[Node], float] | None:
    """``value`` as layout(x·c): the scalar multiplication (or division) at the top of a
    chain of reshapes and transposes read only by each other, its unscaled input x, the
    chain (first node first) and c; None when there is none."""
    chain: list[Node] = []
    node = rw.producer(value)
    while node is not None and node.op in _LAYOUT and rw.uses(node.outputs[0]) == 1:
        chain.insert(0, node)
        value = node.inputs[0]
        node = rw.producer(value)
    if node is None or node.op not in ("mul", "div") or rw.uses(value) != 1:
        return None
    consts = [rw.scalar(v) for v in node.inputs]
    if node.op == "div" and consts[1] is not None and consts[1] != 0:
        return node.inputs[0], chain, 1.0 / consts[1]
    if node.op == "mul" and any(c is not None for c in consts):
        c, x = next((c, x) for c, x in zip(consts, node.inputs[::-1]) if c is not None)
        return x, chain, c
    return None


def _fold_scale(rw: Rewriter, node: Node) -> bool:
    """A constant multiplied into q or k before attention (``q_proj(x)·scaling``, Flax's
    ``q·sqrt(d)`` that undoes the default scale) is the attention's scale."""
    for slot in (0, 1):
        found = _scaled_input(rw, node.inputs[slot])
        if found is None:
            continue
        x, chain, c = found
        for link in chain:
            x = rw.emit(link.op, [x], dict(link.attrs), like=link, shape=link.outputs[0].shape)
        spec = get_spec("attention")
        attrs = spec.normalize_attrs({**node.attrs,
                                      "scale": float(f"{node.attrs['scale'] * c:.9g}")})
        inputs = list(node.inputs)
        inputs[slot] = x
        rw.replace(node.outputs[0], rw.emit("attention", inputs, attrs, like=node,
                                            shape=node.outputs[0].shape))
        return True
    return False


def _drowning_mask(rw: Rewriter, node: Node) -> bool:
    """An additive mask built from an input that only drowns keys on its way into a
    softmax, through sums the attention is not raised over (T5 adds its padding mask to the
    relative position bias), written with one fill: ``where(K, 0, finfo.min)``, whatever
    fill the library chose (TensorFlow's -1e9, PyTorch's finfo.min). Wherever a row keeps
    a key the softmax reading it is the same (``input_masks.drowns``); ``read_mask``
    proved the value equal to ``where(K, 0, fill)`` on every draw of ones and zeros."""
    y = node.outputs[0]
    if len(node.outputs) != 1 or y.dtype not in LOWEST or not any(
            rw.scalar(v) is not None and rw.scalar(v) <= DROWN for v in node.inputs):
        return False
    if y not in _drowning_values(rw):
        return False
    rw.keep(node)  # the value's cone must be visible to ``read_mask``
    mask = read_mask(rw, y)
    if mask is None or mask.fixed is not None or not drowns(mask.on, mask.off) or \
            written_as(rw, y, mask, 0.0, LOWEST[y.dtype]):
        return True  # kept as it is
    rw.replace(y, select(rw, mask, 0.0, LOWEST[y.dtype], y.dtype, node))
    return True


def _drowning_fill(rw: Rewriter, node: Node) -> bool:
    """``where(C, fill, s)`` or ``where(C, s, fill)`` whose output reaches nothing but the
    scores of a softmax over its last axis (``drowning``), with a scalar fill that drowns
    the keys it selects (-inf, -1e9, -1e4) other than the dtype's lowest: the same select
    with the lowest. Wherever a row keeps a key, each drowned score's exponential is 0
    with either fill, in float32 and float64 alike (``input_masks.drowns``)."""
    y = node.outputs[0]
    if len(node.inputs) != 3 or node.inputs[0].dtype != "bool" or y.dtype not in LOWEST:
        return False
    fills = [rw.uniform(v) for v in node.inputs[1:]]
    if fills.count(None) != 1:
        return False
    slot = 1 if fills[0] is not None else 2
    fill = fills[slot - 1]
    lowest = LOWEST[y.dtype]
    if fill is None or not fill <= DROWN or fill == lowest or \
            rw.constant_value(node.inputs[3 - slot]) is not None:
        return False
    if y not in _drowning_values(rw):
        return False
    inputs = list(node.inputs)
    inputs[slot] = rw.constant(np.array(lowest), y.dtype)  # held in float64, as ``select``'s
    rw.replace(y, rw.emit("where", inputs, dict(node.attrs), like=node, shape=y.shape))
    return True


def _lowest_operand_fill(rw: Rewriter, node: Node) -> bool:
    """attention whose additive mask operand is ``where(K, 0, fill)`` (or ``where(K, fill,
    0)``) read there alone, a scalar fill that drowns the keys it selects other than the
    dtype's lowest (``nn.MultiheadAttention``'s ``key_padding_mask`` fills with -inf where
    Flax fills with ``finfo.min``): the same operand with the lowest, as ``_drowning_fill``
    writes the scores' selects. Wherever a row keeps a key the attention is the same; a
    row that keeps none is told apart by the numbers, each side's program running as
    written."""
    if len(node.inputs) != 4:
        return False
    m = node.inputs[3]
    w = rw.producer(m)
    if w is None or w.op != "where" or rw.uses(m) != 1 or m.dtype not in LOWEST or \
            w.inputs[0].dtype != "bool":
        return False
    fills = [rw.uniform(v) for v in w.inputs[1:]]
    if None in fills or 0.0 not in fills:
        return False
    slot = 1 if fills[0] != 0.0 else 2
    fill, lowest = fills[slot - 1], LOWEST[m.dtype]
    if not fill <= DROWN or fill == lowest:
        return False
    inputs = list(w.inputs)
    inputs[slot] = rw.constant(np.array(lowest), m.dtype)
    mask = rw.emit("where", inputs, dict(w.attrs), like=w, shape=m.shape)
    y = node.outputs[0]
    rw.replace(y, rw.emit("attention", [*node.inputs[:3], mask], dict(node.attrs), like=node,
                          shape=y.shape))
    return True


def _drowning_values(rw: Rewriter) -> frozenset[Value]:
    """``drowning`` of the graph the rewrite started from (found once per rewrite)."""
    if "drowning" not in rw.memo:
        rw.memo["drowning"] = drowning(rw.graph)
    return rw.memo["drowning"]


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "where" and _drowning_fill(rw, node):
        return True
    if node.op in ("mul", "where") and _drowning_mask(rw, node):
        return True
    if node.op == "attention":
        return _constant_mask(rw, node) or _fed_operand(rw, node) or \
            _lowest_operand_fill(rw, node) or _fold_scale(rw, node)
    if node.op == "softmax":
        return _canonical_mask(rw, node)
    if node.op != "matmul":
        return False
    found = _pattern(rw, node)
    if found is None:
        return False
    rw.keep(node)  # the root must be visible to the region walk
    if found.fed is not None:
        _raise_masked(rw, node, found)
        return True
    if found.bias is not None:
        _raise_biased(rw, node, found)
        return True
    q, q_perm, kt, kt_perm, v = found.q, found.q_perm, found.kt, found.kt_perm, found.v
    y = node.outputs[0]
    nodes = region(rw, y, [q, kt, v])
    if nodes is None:
        return True
    mask = found.mask
    attrs = _attrs(found, mask is not None)

    def candidate(env):
        return _reference(found, env, mask, attrs)

    claim = ("attention", attrs, q_perm, kt_perm,
             None if mask is None else (mask.tobytes(), mask.shape))
    if agrees(rw, nodes, y, [q, kt, v], candidate, claim=claim,
              batch=_heads(y, (q, q_perm), (kt, kt_perm), v)):
        _emit(rw, node, found, attrs, [] if mask is None else
              [rw.constant(mask.astype(y.dtype), y.dtype)])
    return True


def _attrs(m: _Match, has_mask: bool) -> dict:
    """The raised attention's attributes: the match's scale and causality."""
    return get_spec("attention").normalize_attrs(
        {"scale": float(f"{m.scale:.9g}"), "causal": m.causal, "has_mask": has_mask})


def _reference(m: _Match, env: Mapping[Value, np.ndarray], mask: np.ndarray | None,
               attrs: dict) -> np.ndarray:
    """The fp64 reference of the raised attention on the region's random values."""
    kk = np.swapaxes(_apply(env[m.kt], m.kt_perm), -1, -2)
    return get_spec("attention").reference(_apply(env[m.q], m.q_perm), kk, env[m.v], mask,
                                           **attrs)


def _emit(rw: Rewriter, node: Node, m: _Match, attrs: dict, mask: list[Value]) -> None:
    """attention(q, k, v[, mask]) in place of ``node``, q and k transposed as ``m`` says."""
    q, kt, y = m.q, m.kt, node.outputs[0]
    if m.q_perm is not None:
        q = rw.emit("transpose", [q], {"perm": m.q_perm}, like=node,
                    shape=tuple(q.shape[i] for i in m.q_perm))
    rank = y.rank
    swap = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    k_perm = tuple((m.kt_perm or tuple(range(rank)))[i] for i in swap)  # kᵀ = T(kt_base)
    k = kt
    if k_perm != tuple(range(rank)):
        k = rw.emit("transpose", [kt], {"perm": k_perm}, like=node,
                    shape=tuple(kt.shape[i] for i in k_perm))
    rw.replace(y, rw.emit("attention", [q, k, m.v, *mask], attrs, like=node, shape=y.shape))


def _learned_bias(rw: Rewriter, bias: Value, limit: int = 64) -> bool:
    """Whether ``bias`` is computed from weights and integer constants (indices) alone: a
    learned bias (BEiT's relative positions), not a mask; or from those and a constant
    mask that drowns keys (T5's decoder adds its causal fill to its position bias before
    the scores, which its exports fold into one tensor). A mask built from an input, zeros
    from an all-ones one, or a fill alone keeps the forms ``input_masks`` and the mask
    passes give it."""
    seen: set[Value] = set()
    stack, learned, masked = [bias], False, False
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if len(seen) > limit or v in rw.graph.inputs:
            return False
        data = rw.constant_value(v)
        if data is not None:
            if data.dtype.kind == "f":
                if not _drowning_mask_constant(data):
                    return False  # a mask of zeros (T5's TF port adds one), a scale
                masked = True
            continue
        if rw.graph.param_name(v) is not None:
            learned = True
        node = rw.producer(v)
        if node is not None:
            stack.extend(node.inputs)
    return learned or not masked  # a fill alone is a mask


def _computed_bias(rw: Rewriter, bias: Value, limit: int = 64) -> bool:
    """Whether ``bias`` is a float tensor the model computes from its data (SAM's
    decomposed relative positions, ``q·R_h + q·R_w``) or takes as a float input, and not
    a mask: no integer or boolean input reaches it through elementwise and layout ops
    alone (a key-padding mask), and no fill that drowns keys is added in (a causal mask)."""
    if not bias.dtype.startswith(("float", "bfloat")):
        return False
    seen: set[Value] = set()
    stack = [bias]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if len(seen) > limit:
            return False
        data = rw.constant_value(v)
        if data is not None:
            if np.asarray(data).dtype.kind == "f" and np.any(np.asarray(data) <= DROWN):
                return False
            continue
        if v in rw.graph.inputs:
            if not v.dtype.startswith(("float", "bfloat")):
                return False  # an attention mask of ones and zeros, read as numbers
            continue
        node = rw.producer(v)
        if node is not None and node.op in MASK_OPS:
            stack.extend(node.inputs)
    return True


def _drowning_mask_constant(data: np.ndarray) -> bool:
    """Whether a floating constant is an additive mask: zeros, and some key drowned."""
    data = np.asarray(data)
    drowned = data <= DROWN
    return bool(np.any(drowned) and np.all(drowned | (data == 0)))


def _raise_biased(rw: Rewriter, node: Node, m: _Match) -> None:
    """Attention with a learned tensor added to its scaled scores: attention with that
    tensor as its additive mask operand (SDPA's float ``attn_mask``), proved on random q,
    k, v and random values for the bias."""
    bias, y = m.bias, node.outputs[0]
    assert bias is not None
    if not (_learned_bias(rw, bias) or _computed_bias(rw, bias)):
        return
    scores = y.shape[:-1] + (m.v.shape[-2],)  # [..., queries, keys]
    if bias.rank > y.rank or bias.dtype not in LOWEST:
        return
    try:
        if np.broadcast_shapes(bias.shape, scores) != scores:
            return
    except ValueError:
        return
    free = list(dict.fromkeys([m.q, m.kt, m.v, bias]))
    if len(free) != 4:
        return
    nodes = region(rw, y, free)
    if nodes is None:
        return
    attrs = _attrs(m, True)

    def candidate(env):
        return _reference(m, env, env[bias], attrs)

    if agrees(rw, nodes, y, free, candidate,
              claim=("attention-bias", attrs, m.q_perm, m.kt_perm, bias.shape)):
        _emit(rw, node, m, attrs, [bias])


def _raise_masked(rw: Rewriter, node: Node, m: _Match) -> None:
    """Attention masked with a mask built from an input: the additive mask ``where(K, on,
    off)`` it amounts to, or the boolean K (as SDPA's) where the rows that keep no key are
    zeroed after the softmax or where the mask drowns the keys it masks (``drowns``); a
    causal pattern and-ed into it is the attention's causality. Proved on random q, k, v
    and random ones and zeros for the input (each row keeping a key, and with the zeroed
    form one row keeping none)."""
    fed, y = m.fed, node.outputs[0]
    masks = {fed.operand: fed.mask, **dict(m.zeroing)}
    free = list(dict.fromkeys([m.q, m.kt, m.v, *masks]))
    nodes = region(rw, y, free)
    if nodes is None:
        return
    attrs = _attrs(m, True)
    boolean = m.zeroed or drowns(fed.on, fed.off)  # -1e4, -1e9, finfo.min and -inf alike

    def candidate(env, keep):
        if m.band is not None:
            keep = np.broadcast_to(keep, np.broadcast_shapes(keep.shape, m.band.shape)) & m.band
        return _reference(m, env, keep if boolean else np.where(keep, fed.on, fed.off),
                          attrs)

    # a row that keeps no key is proved only where the zeros there are what is raised
    if not proved(rw, nodes, y, free, masks, candidate,
                  empty_rows=(False, True) if m.after and m.zeroed else (False, False),
                  band=m.band):
        return
    source = replace(fed.mask, fixed=None)  # the causal part is the attention's flag
    mask = (keep_mask(rw, source, node) if boolean
            else select(rw, source, fed.on, fed.off, fed.scores.dtype, node))
    if m.band is not None:  # the band, and-ed in: one constant of its smallest shape
        shape = np.broadcast_shapes(mask.shape, m.band.shape)
        mask = rw.emit("logical_and", [mask, rw.constant(m.band, "bool")], like=node,
                       shape=shape, dtype="bool")
    _emit(rw, node, m, attrs, [mask])


def _fed_operand(rw: Rewriter, node: Node) -> bool:
    """attention whose mask operand is built from an input, written otherwise than in the
    one form (``input_masks``): the same attention with that form. ``read_mask`` proved
    the operand equal to it on every draw of ones and zeros; where the one form changes
    what the attention computes on a row that keeps no key (a fill that drowns the keys
    it masks made the boolean mask, a causal pattern and-ed into the mask made the
    attention's causality), it is proved again on random q, k, v and masks that keep a
    key in every row."""
    if not node.attrs["has_mask"] or rw.is_fixed(node.inputs[3]):
        return False
    operand = node.inputs[3]
    mask = read_mask(rw, operand)
    if mask is None or is_select(rw, operand, mask):
        return False
    y = node.outputs[0]
    attrs = dict(node.attrs)
    if mask.fixed is not None:
        if attrs["causal"] or not _fixed_causal(mask.fixed, node.inputs[3].shape[:-2] + (
                node.inputs[0].shape[-2], node.inputs[1].shape[-2])):
            return False
        attrs["causal"] = True
    if operand.dtype == "bool" and mask.on is not True:
        return False
    boolean = operand.dtype == "bool" or drowns(mask.on, mask.off)
    if mask.fixed is not None or (boolean and operand.dtype != "bool"):
        q, k, v = node.inputs[:3]
        spec = get_spec("attention")
        new = spec.normalize_attrs(attrs)
        rw.keep(node)  # the root must be visible to the region walk
        if len({q, k, v, operand}) != 4 or not proved(
                rw, [node], y, [q, k, v, operand], {operand: mask},
                lambda env, keep: spec.reference(
                    env[q], env[k], env[v],
                    keep if boolean else np.where(keep, mask.on, mask.off), **new)):
            return False
        attrs = new
    source = replace(mask, fixed=None)
    canonical = (keep_mask(rw, source, node) if boolean
                 else select(rw, source, mask.on, mask.off, operand.dtype, node))
    rw.replace(y, rw.emit("attention", [*node.inputs[:3], canonical], attrs,
                          like=node, shape=y.shape))
    return True


class RaiseAttentionPass:
    """See the module docstring."""

    name = "raise-attention"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
