"""Lower two-operand ``einsum`` to transpose, reshape and ``matmul``, the form the other
raising rules (linear, attention) recognize: ``bqhd,bkhd->bhqk`` is a batched q·kᵀ; orient
a product of two transposed operands (or of anything and transposed softmax weights) so
that the plain one comes first; a product transposed whole, of a transposed operand, is the
product the other way round (``(Xᵀ·B)ᵀ = Bᵀ·X``); and a product that
sums over one term (a contraction of size 1, as an einsum that only scales, like
``...hqk,h->...hqk``, is written) is a broadcast multiplication.

Requires: a verified graph. Ensures: exact rewrites (the same products and sums in another
arrangement); einsums with repeated or broadcast subscripts stay as they are.
"""

from __future__ import annotations

from math import prod

from specgraph.ir import Graph, Node, Value
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["LowerEinsumPass"]


def _parse(equation: str) -> tuple[str, str, str] | None:
    if "..." in equation or "->" not in equation:
        return None
    ins, out = equation.replace(" ", "").split("->")
    parts = ins.split(",")
    if len(parts) != 2:
        return None
    a, b = parts
    if len(set(a)) != len(a) or len(set(b)) != len(b) or len(set(out)) != len(out):
        return None
    if set(out) - set(a) - set(b):
        return None
    return a, b, out


def _arrange(rw: Rewriter, v: Value, subs: str, order: str, node: Node) -> Value:
    perm = tuple(subs.index(c) for c in order)
    if perm == tuple(range(len(perm))):
        return v
    return rw.emit("transpose", [v], {"perm": perm}, like=node,
                   shape=tuple(v.shape[p] for p in perm))


def _reshape(rw: Rewriter, v: Value, shape: tuple[int, ...], node: Node) -> Value:
    if v.shape == shape:
        return v
    return rw.emit("reshape", [v], {"shape": shape}, like=node, shape=shape)


def _swap(rank: int) -> tuple[int, ...]:
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


def _orient(rw: Rewriter, node: Node) -> bool:
    """matmul(transpose(a), transpose(b)) = (transpose(b)ᵀ·transpose(a)ᵀ)ᵀ where b's view
    swaps its last two axes: put the plain operand first, as attention is written
    (softmax(q·kᵀ)·v, not (vᵀ·softmaxᵀ)ᵀ); a first operand that is no transpose moves
    behind attention weights seen transposed (JAX's einsum ``...hqk,...khd->...qhd`` over
    repeated key/value heads writes vᵀ·pᵀ)."""
    x, y = node.inputs
    tx, ty = rw.producer(x), rw.producer(y)
    if ty is None or ty.op != "transpose":
        return False
    if tx is None or tx.op != "transpose":
        weights = rw.producer(ty.inputs[0])
        if weights is None or weights.op != "softmax":
            return False  # a plain first operand moves only behind attention weights
    rank = x.rank
    qy = ty.attrs["perm"]
    if y.rank != rank or rank < 2 or qy[-2] < qy[-1]:
        return False
    users = rw.graph.consumers(node.outputs[0])
    if len(users) != 1 or users[0].op != "transpose":
        return False  # only where the transposed result is transposed again anyway
    swap = _swap(rank)
    if tx is None or tx.op != "transpose":
        x2 = _view(rw, x, swap, node)
    else:
        x2 = _view(rw, tx.inputs[0], tuple(tx.attrs["perm"][i] for i in swap), node)
    y2 = _view(rw, ty.inputs[0], tuple(qy[i] for i in swap), node)
    out_shape = node.outputs[0].shape
    inner = rw.emit("matmul", [y2, x2], like=node, shape=tuple(out_shape[i] for i in swap))
    rw.replace(node.outputs[0], rw.emit("transpose", [inner], {"perm": swap}, like=node,
                                        shape=out_shape))
    return True


def _transposed_product(rw: Rewriter, node: Node) -> bool:
    """(Xᵀ·B)ᵀ = Bᵀ·X (and (A·Yᵀ)ᵀ = Y·Aᵀ): a product transposed whole, of which an operand
    is itself transposed, is the product the other way round with one transpose fewer.
    ``einsum("bnd,bng->bgd", h, g)`` is ``(hᵀ·g)ᵀ`` in PyTorch's decomposition and ``gᵀ·h``
    in JAX's: one canonical form."""
    rank = node.outputs[0].rank
    if rank < 2 or tuple(node.attrs["perm"]) != _swap(rank):
        return False
    product = rw.producer(node.inputs[0])
    if product is None or product.op != "matmul" or rw.uses(product.outputs[0]) != 1:
        return False
    a, b = product.inputs
    if a.rank != rank or b.rank != rank:
        return False

    def swapped(v: Value) -> Value | None:  # what v is the last-two-axes swap of
        t = rw.producer(v)
        return t.inputs[0] if t is not None and t.op == "transpose" and \
            tuple(t.attrs["perm"]) == _swap(rank) else None

    plain_a, plain_b = swapped(a), swapped(b)
    if plain_a is None and plain_b is None:
        return False
    first = plain_b if plain_b is not None else _view(rw, b, _swap(rank), product)
    second = plain_a if plain_a is not None else _view(rw, a, _swap(rank), product)
    rw.replace(node.outputs[0], rw.emit("matmul", [first, second], like=product,
                                        shape=node.outputs[0].shape))
    return True


def _view(rw: Rewriter, v: Value, perm: tuple[int, ...], node: Node) -> Value:
    if perm == tuple(range(len(perm))):
        return v
    return rw.emit("transpose", [v], {"perm": perm}, like=node,
                   shape=tuple(v.shape[p] for p in perm))


def _single_term(rw: Rewriter, node: Node) -> bool:
    """matmul(x[..., m, 1], y[..., 1, n]) sums one product per element: x·y broadcast."""
    x, y = node.inputs
    if x.rank < 2 or y.rank < 2 or x.shape[-1] != 1:
        return False
    rw.replace(node.outputs[0], rw.emit("mul", [x, y], like=node,
                                        shape=node.outputs[0].shape))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "matmul":
        return _single_term(rw, node) or _orient(rw, node)
    if node.op == "transpose":
        return _transposed_product(rw, node)
    if node.op != "einsum" or len(node.inputs) != 2:
        return False
    parsed = _parse(node.attrs["equation"])
    if parsed is None:
        return False
    a_subs, b_subs, out = parsed
    a, b = node.inputs
    size = {c: s for subs, v in ((a_subs, a), (b_subs, b)) for c, s in zip(subs, v.shape)}
    if any(size[c] != s for subs, v in ((a_subs, a), (b_subs, b)) for c, s in zip(subs, v.shape)):
        return False
    batch = "".join(c for c in out if c in a_subs and c in b_subs)
    contract = "".join(c for c in a_subs if c in b_subs and c not in out)
    free_a = "".join(c for c in out if c in a_subs and c not in b_subs)
    free_b = "".join(c for c in out if c in b_subs and c not in a_subs)
    if set(a_subs) != set(batch + contract + free_a) or set(b_subs) != set(batch + contract
                                                                          + free_b):
        return False  # a subscript summed within one operand only
    bs = tuple(size[c] for c in batch)
    fa, k, fb = (prod(size[c] for c in g) for g in (free_a, contract, free_b))
    left = _reshape(rw, _arrange(rw, a, a_subs, batch + free_a + contract, node),
                    bs + (fa, k), node)
    right = _reshape(rw, _arrange(rw, b, b_subs, batch + contract + free_b, node),
                     bs + (k, fb), node)
    prod_value = rw.emit("matmul", [left, right], like=node, shape=bs + (fa, fb))
    grouped = batch + free_a + free_b
    shaped = _reshape(rw, prod_value, tuple(size[c] for c in grouped), node)
    rw.replace(node.outputs[0], _arrange(rw, shaped, grouped, out, node))
    return True


class LowerEinsumPass:
    """See the module docstring."""

    name = "lower-einsum"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
