"""Key-padding masks built from an ``attention_mask`` input of ones and zeros, however
written, become attention with one mask operand: the boolean ``cast(reshape(m), bool)``
(SDPA's boolean mask) where the mask drowns the keys it masks (-inf, ``finfo.min``, -1e4,
-1e9: the same softmax wherever a row keeps a key) or where the rows that keep no key are
zeroed, else ``where(cast(reshape(m), bool), 0, fill)`` added; a causal pattern and-ed into
the mask (Flax's ``combine_masks``, PyTorch's ``causal & padding``) is the attention's
causality; each rewrite proved, and fills that do not drown stay different."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.graph_nx import isomorphic
from specgraph.interpreter import run
from specgraph.ir import Graph, GraphBuilder, Value
from specgraph.ops import get_spec
from specgraph.passes import canonicalize
from specgraph.passes.input_masks import read_mask
from specgraph.passes.rewrite import Rewriter

F = "float32"
B, H, T, D = 2, 2, 5, 4
FINFO = float(np.finfo(np.float32).min)
PADDED = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
EMPTY_ROW = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])


class M:
    """Attention over x [B, H, T, D] with an ``attention_mask`` input m [B, T] (int64)."""

    def __init__(self) -> None:
        self.b = GraphBuilder()
        self.x = self.b.input("x", (B, H, T, D), F)
        self.m = self.b.input("attention_mask", (B, T), "int64")

    def c(self, value, dtype=np.float32) -> Value:
        return self.b.constant(np.array(value, dtype=dtype))

    def __call__(self, op, *inputs, **attrs) -> Value:
        spec = get_spec(op)
        arrays = [np.zeros(v.shape, dtype=bool if v.dtype == "bool" else float)
                  for v in inputs]
        with np.errstate(all="ignore"):
            out = np.asarray(spec.reference(*arrays, **spec.normalize_attrs(attrs)))
        dtype = attrs.get("dtype") if op == "cast" else ("bool" if out.dtype == bool else F)
        return self.b.add(op, list(inputs), attrs, shape=out.shape, dtype=dtype)

    def scores(self) -> tuple[Value, Value]:
        """q·kᵀ/2 and v."""
        k = self("transpose", self("sub", self.x, self.c(0.5)), perm=(0, 1, 3, 2))
        return self("div", self("matmul", self.x, k), self.c(2.0)), self("add", self.x,
                                                                             self.c(1.0))

    def key(self) -> Value:
        return self("reshape", self.m, shape=(B, 1, 1, T))

    def build(self, p: Value, v: Value) -> Graph:
        self.b.output("y", self("matmul", p, v))
        return self.b.build()


def _written(how: str) -> Graph:
    f = M()
    s, v = f.scores()
    m = f.key()
    if how == "hf-finfo":  # (1 - m) * finfo.min added
        s = f("add", s, f("mul", f("sub", f.c(1.0), f("cast", m, dtype=F)), f.c(FINFO)))
    elif how == "bert-1e4":
        s = f("add", s, f("mul", f("sub", f.c(1.0), f("cast", m, dtype=F)), f.c(-1e4)))
    elif how == "fill-finfo":  # masked_fill(m == 0, finfo.min)
        s = f("where", f("equal", m, f.c(0, np.int64)), f.c(FINFO), s)
    elif how == "flax-finfo":  # where(m.astype(bool), s, finfo.min)
        s = f("where", f("cast", m, dtype="bool"), s, f.c(FINFO))
    elif how == "fill-inf":
        s = f("where", f("equal", m, f.c(0, np.int64)), f.c(-np.inf), s)
    elif how == "greater-inf":  # where(m > 0, s, -inf)
        s = f("where", f("greater", m, f.c(0, np.int64)), s, f.c(-np.inf))
    elif how == "select-1e9":  # The Annotated Transformer's masked_fill(m == 0, -1e9)
        s = f("where", f("cast", m, dtype="bool"), s, f.c(-1e9))
    elif how == "distilbert":  # s - 1e30·(1 - m)
        s = f("sub", s, f("mul", f.c(1e30), f("sub", f.c(1.0), f("cast", m, dtype=F))))
    elif how == "add-100":  # a fill that does not drown: exp(-100) is a number in float64
        s = f("add", s, f("mul", f("sub", f.c(1.0), f("cast", m, dtype=F)), f.c(-100.0)))
    elif how == "tf-opt":  # a causal mask of -1e8 plus a padding mask of -1e8, added
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        causal = f.c(np.where(j <= i, 0.0, -1e8).reshape(1, 1, T, T).astype(np.float32))
        pad = f("mul", f("sub", f.c(1.0), f("cast", m, dtype=F)), f.c(-1e8))
        s = f("add", s, f("add", causal, pad))
    elif how in ("flax-causal", "flax-band"):  # combine_masks(padding, causal), as a bias
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        fixed = (j <= i) if how == "flax-causal" else (j <= i) & (j >= i - 1)
        both = f("logical_and", f("not_equal", m, f.c(0, np.int64)),
                 f.c(fixed.reshape(1, 1, T, T)))
        bias = f("where", f("greater", f("cast", both, dtype=F), f.c(0.0)), f.c(0.0),
                 f.c(FINFO))
        s = f("add", s, bias)
    elif how == "pairwise":  # make_attention_mask(m, m): query and key masked
        pair = f("mul", f("reshape", m, shape=(B, 1, T, 1)), m)
        s = f("where", f("not_equal", pair, f.c(0, np.int64)), s, f.c(FINFO))
    p = None if how in ("keras", "onnx-inf", "onnx-finfo") else f("softmax", s, axis=3)
    if how == "keras":  # where(m, s, -1e9), softmax, where(m, p, 0)
        keep = f("cast", m, dtype="bool")
        p = f("where", keep, f("softmax", f("where", keep, s, f.c(-1e9)), axis=3), f.c(0.0))
    elif how in ("onnx-inf", "onnx-finfo"):  # Where(m, 0, fill) + s, Softmax, IsNaN·Where
        fill = -np.inf if how == "onnx-inf" else FINFO
        mask = f("where", f("cast", m, dtype="bool"), f.c(0.0), f.c(fill))
        p = f("softmax", f("add", s, mask), axis=3)
        p = f("where", f("not_equal", p, p), f.c(0.0), p)
    return f.build(p, v)


def _sdpa(mask: str) -> Graph:
    f = M()
    k = f("sub", f.x, f.c(0.5))
    v = f("add", f.x, f.c(1.0))
    m = f.key()
    if mask == "bool":
        operand = f("cast", m, dtype="bool")
    else:  # HF's extended mask handed to SDPA
        operand = f("mul", f("sub", f.c(1.0), f("cast", m, dtype=F)), f.c(FINFO))
    f.b.output("y", f("attention", f.x, k, v, operand, scale=0.5, has_mask=True))
    return f.b.build()


def _attention(g: Graph):
    (att,) = [n for n in g.nodes if n.op == "attention"]
    return att


def _same(before: Graph, after: Graph, mask: np.ndarray = PADDED) -> np.ndarray:
    x = 3 * np.random.default_rng(0).standard_normal((B, H, T, D))
    want = run(before, [x, mask])["y"]
    got = run(after, [x, mask])["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    return got


@pytest.mark.parametrize("how", ["hf-finfo", "fill-finfo", "flax-finfo", "onnx-finfo",
                                 "bert-1e4", "distilbert", "fill-inf", "keras", "onnx-inf",
                                 "select-1e9"])
def test_a_drowning_mask_however_written_is_one_boolean_mask(how: str):
    """HF PyTorch's and Flax's finfo.min, TensorFlow BERT's -1e4, DistilBERT's subtracted
    1e30·(1 - m), -inf, Keras' zeroed rows: one mask of the keys kept, equal wherever a row
    keeps a key."""
    g = _written(how)
    c = canonicalize(g)
    att = _attention(c)
    assert att.attrs["has_mask"] and att.attrs["scale"] == 0.5
    assert [n.op for n in c.nodes if n.op not in ("sub", "add", "transpose")] == \
        ["reshape", "cast", "attention"]
    assert att.inputs[3].dtype == "bool"
    assert isomorphic(c, canonicalize(_sdpa("bool")))
    _same(g, c)


def test_a_negated_condition_with_its_branches_swapped_is_the_same_mask():
    lhs, rhs = canonicalize(_written("fill-inf")), canonicalize(_written("greater-inf"))
    assert _attention(lhs).attrs["has_mask"] and isomorphic(lhs, rhs)
    _same(_written("fill-inf"), lhs)


@pytest.mark.parametrize("how", ["keras", "onnx-inf"])
def test_zeroed_masked_rows_are_sdpa_boolean_mask(how: str):
    g = _written(how)
    c = canonicalize(g)
    assert isomorphic(c, canonicalize(_sdpa("bool")))
    mask = _attention(c).inputs[3]
    assert mask.dtype == "bool"
    got = _same(g, c, EMPTY_ROW)  # the row keeping no key gives zeros on both
    assert np.all(got[1] == 0.0) and np.all(np.isfinite(got))


def test_a_fill_that_does_not_drown_stays_an_added_mask_of_its_own():
    c = canonicalize(_written("add-100"))
    mask = _attention(c).inputs[3]
    assert mask.dtype == F
    assert not isomorphic(c, canonicalize(_written("hf-finfo")))
    _same(_written("add-100"), c)


def test_a_causal_pattern_and_ed_into_the_padding_mask_is_the_attention_s_causality():
    """Flax GPT-2's combine_masks(padding, causal) turned into a finfo.min bias, PyTorch
    GPT-2's causal & padding handed to SDPA, TensorFlow OPT's sum of a causal and a padding
    mask of -1e8: causal attention with the padding mask, the same graph; a band and-ed in
    (a local attention's window) is not causal: attention with the band and-ed into the
    boolean padding mask, one constant of its smallest shape."""
    g = _written("flax-causal")
    c = canonicalize(g)
    att = _attention(c)
    assert att.attrs["causal"] and att.inputs[3].dtype == "bool"
    _same(g, c)
    f = M()  # SDPA given causal & padding, as PyTorch's GPT-2 builds it
    k = f("sub", f.x, f.c(0.5))
    v = f("add", f.x, f.c(1.0))
    tril = np.tril(np.ones((T, T), bool)).reshape(1, 1, T, T)
    both = f("logical_and", f.c(tril), f("cast", f.key(), dtype="bool"))
    f.b.output("y", f("attention", f.x, k, v, both, scale=0.5, has_mask=True))
    sdpa = f.b.build()
    c2 = canonicalize(sdpa)
    assert _attention(c2).attrs["causal"] and isomorphic(c, c2)
    _same(sdpa, c2)
    tf = canonicalize(_written("tf-opt"))  # TensorFlow's OPT: -2e8 where both mask
    assert isomorphic(c, tf)
    _same(_written("tf-opt"), tf)
    band = canonicalize(_written("flax-band"))
    att = _attention(band)
    assert not att.attrs["causal"] and att.inputs[3].dtype == "bool"
    anded = band.producer(att.inputs[3])
    assert anded is not None and anded.op == "logical_and"
    # equal wherever a row keeps a key: the band of two keys, the last one padded
    _same(_written("flax-band"), band, np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]))


def test_sdpa_given_hf_extended_mask_takes_the_one_form():
    c = canonicalize(_sdpa("hf-finfo"))
    assert isomorphic(c, canonicalize(_written("hf-finfo")))
    _same(_sdpa("hf-finfo"), c)


@pytest.mark.parametrize("how", ["pairwise"])
def test_a_mask_that_is_not_one_of_these_stays_written_out(how: str):
    """A mask of query and key is not a key-padding mask."""
    assert "attention" not in [n.op for n in canonicalize(_written(how)).nodes]


def _kept(g: Graph) -> Rewriter:
    """A rewriter that has kept every node of ``g``, as a rule sees it at the end."""
    rw = Rewriter(g)
    for node in g.nodes:
        rw.keep(node)
    return rw


def test_read_mask_finds_the_input_its_values_and_its_layout():
    f = M()  # Flax's make_attention_mask(ones, m): [B, 1, T, T], then broadcast to heads
    pair = f("mul", f.c(np.ones((B, T, 1), np.float32)), f("cast", f("reshape", f.m,
                                                                     shape=(B, 1, T)), dtype=F))
    keep = f("expand", f("not_equal", f("reshape", pair, shape=(B, 1, T, T)), f.c(0.0)),
             shape=(B, H, T, T))
    s, v = f.scores()
    g = f.build(f("where", keep, s, f.c(FINFO)), v)
    mask = read_mask(_kept(g), keep)
    assert mask is not None and mask.source is f.m
    assert (mask.shape, mask.on, mask.off) == ((B, 1, 1, T), True, False)
    f = M()  # HF's (1 - m)·finfo.min, added
    s, v = f.scores()
    hf = f("mul", f("sub", f.c(1.0), f("cast", f.m, dtype=F)), f.c(FINFO))
    g = f.build(f("softmax", f("add", s, f("reshape", hf, shape=(B, 1, 1, T))), axis=3), v)
    mask = read_mask(_kept(g), hf)
    assert (mask.shape, mask.on, mask.off) == ((B, T), 0.0, FINFO)
    assert not np.signbit(mask.on)  # (1 - 1)·finfo.min is -0.0: the zero it adds


def test_attention_with_a_boolean_mask_zeroes_a_row_that_keeps_no_key():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 3, 4)) for _ in range(3))
    keep = np.array([[True, False, True], [False, False, False], [True, True, True]])
    spec = get_spec("attention")
    out = spec.reference(q, k, v, keep, scale=0.5, has_mask=True)
    assert np.all(out[:, :, 1] == 0.0) and np.all(np.isfinite(out))
    with np.errstate(invalid="ignore"):
        additive = spec.reference(q, k, v, np.where(keep, 0.0, -np.inf), scale=0.5,
                                  has_mask=True)
    np.testing.assert_allclose(out[:, :, [0, 2]], additive[:, :, [0, 2]])
    assert np.all(np.isnan(additive[:, :, 1]))


@pytest.mark.parametrize("other", ["reduced", "returned"])
def test_an_input_also_read_otherwise_is_not_taken_for_ones_and_zeros(other: str):
    """Ids, positions or token types hold other integers: an input also reduced (other
    than summed: its largest entry) or returned is not assumed to hold ones and zeros."""
    f = M()
    s, v = f.scores()
    cast = f("cast", f.key(), dtype=F)
    s = f("add", s, f("mul", f("sub", f.c(1.0), cast), f.c(FINFO)))
    if other == "reduced":
        f.b.output("largest", f("reduce_max", f.m, axes=(1,)))
    else:
        f.b.output("ids", f.m)
    g = f.build(f("softmax", s, axis=3), v)
    assert "attention" not in [n.op for n in canonicalize(g).nodes]


def test_rows_summed_for_their_lengths_leave_the_mask_a_mask():
    """ESM's token dropout divides by each row's length, the mask summed along it: a
    mask's use, and the mask is still read as one."""
    f = M()
    s, v = f.scores()
    cast = f("cast", f.key(), dtype=F)
    s = f("add", s, f("mul", f("sub", f.c(1.0), cast), f.c(FINFO)))
    f.b.output("lengths", f("reduce_sum", f.m, axes=(1,)))
    g = f.build(f("softmax", s, axis=3), v)
    assert _attention(canonicalize(g)).inputs[3].dtype == "bool"


def test_positions_counted_along_the_mask_leave_it_a_mask():
    """OPT counts its positions along the attention mask, cumsum(m)·m - 1: a mask's use,
    and the mask is still read as one."""
    f = M()
    s, v = f.scores()
    cast = f("cast", f.key(), dtype=F)
    s = f("add", s, f("mul", f("sub", f.c(1.0), cast), f.c(FINFO)))
    positions = f("sub", f("mul", f("cumsum", f.m, axis=1), f.m), f.c(1, np.int64))
    f.b.output("positions", positions)
    g = f.build(f("softmax", s, axis=3), v)
    c = canonicalize(g)
    assert _attention(c).inputs[3].dtype == "bool"