"""The mutation table: every mutation planted in the golden transformer block and CNN, with the
layer it changes, and how a finding is scored against it.

One table for ``tests/test_mutations.py`` (a named subset, PyTorch against JAX) and
``python -m bench.mutations`` (all of it, every pair of PyTorch, JAX, Keras and ONNX). The
mutants themselves are built by ``mutant(model, name)`` in ``torch_mutants.py``,
``jax_models.py`` and ``keras_mutants.py``, each of which refuses a name it does not plant.
Nothing here imports a framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MODELS", "MUTATIONS", "Mutation", "mutations_of", "names_mutated_layer",
           "numerically_located", "reshaped_params", "structurally_located"]


@dataclass(frozen=True)
class Mutation:
    """One planted difference in a golden model.

    Attributes:
        model: the golden model it is planted in ("transformer_block" or "cnn").
        name: the mutation, as every framework's ``mutant(model, name)`` knows it.
        op: the canonical op of the mutated layer: the op of the one finding the structural
            diff reports, from every framework to every other.
        numeric_ops: the canonical ops of the layers where the numbers may part first:
            ``op`` and, where the mutation changes two layers (a swap, a layer replaced by
            another, a residual moved around a norm), the other one.
        reshapes: whether it changes a parameter's shape, so that lhs's weights cannot be
            moved into rhs (the weight transfer must name that parameter).
        numeric_miss: why the numeric check alone does not find it at its layer, or "".
        numeric_miss_lhs: the lhs frameworks ``numeric_miss`` holds for (empty: all).
    """

    model: str
    name: str
    op: str
    numeric_ops: frozenset[str]
    reshapes: bool = False
    numeric_miss: str = ""
    numeric_miss_lhs: frozenset[str] = frozenset()

    def missed_numerically(self, lhs: str) -> str:
        """Why the numeric check alone misses this mutation with ``lhs`` the golden
        model's framework, or "" where it finds it."""
        if self.numeric_miss and (not self.numeric_miss_lhs or lhs in self.numeric_miss_lhs):
            return self.numeric_miss
        return ""


def _m(model: str, name: str, op: str, *also: str, **more: Any) -> Mutation:
    return Mutation(model, name, op, frozenset({op, *also}), **more)


_BLOCK, _CNN = "transformer_block", "cnn"

# in the order the benchmark runs them
MUTATIONS: tuple[Mutation, ...] = (
    _m(_BLOCK, "missing_activation", "gelu"),
    _m(_BLOCK, "eps", "layer_norm", numeric_miss=(
        "on JAX's example inputs ln1's eps 1e-12 instead of 1e-5 moves no layer's values "
        "beyond float32 tolerance, even computed in float64 (ln1 by 1.7e-5 of their scale)"),
       numeric_miss_lhs=frozenset({"jax"})),
    _m(_BLOCK, "gelu_approximation", "gelu"),
    _m(_BLOCK, "missing_bias", "linear"),
    _m(_BLOCK, "missing_residual", "add"),
    _m(_BLOCK, "post_ln", "layer_norm", "add"),
    _m(_BLOCK, "missing_scale", "attention"),
    _m(_BLOCK, "causal", "attention"),
    _m(_BLOCK, "hidden_size", "linear", reshapes=True),
    # the canonical attention has no head count: it lives in the shapes of the reshapes
    # that split and merge the heads, where the numbers first part
    _m(_BLOCK, "num_heads", "attention", "reshape"),
    _m(_BLOCK, "softmax_axis", "attention", "softmax"),
    _m(_CNN, "missing_activation", "relu"),
    _m(_CNN, "eps", "batch_norm"),
    _m(_CNN, "stride_moved", "conv"),
    _m(_CNN, "asymmetric_padding", "conv"),
    _m(_CNN, "missing_bias", "conv"),
    _m(_CNN, "swapped_layers", "batch_norm", "relu"),
    _m(_CNN, "hidden_size", "conv", reshapes=True),
    _m(_CNN, "batchnorm_to_layernorm", "batch_norm", "layer_norm", numeric_miss=(
        "bn2's scale and bias have no counterpart in the layer norm, so no weights move")),
)

MODELS: tuple[str, ...] = tuple(dict.fromkeys(m.model for m in MUTATIONS))


def mutations_of(model: str) -> list[Mutation]:
    """The mutations of ``model``, in table order."""
    if model not in MODELS:
        raise KeyError(f"no mutants of {model!r}; use one of {list(MODELS)}")
    return [m for m in MUTATIONS if m.model == model]


def structurally_located(finding: Any, mutation: Mutation) -> bool:
    """Whether a structural finding concerns the mutated layer: its op is the layer's op."""
    return finding.op == mutation.op


def numerically_located(finding: Any, ops: frozenset[str] | set[str]) -> bool:
    """Whether a numeric finding concerns a layer of one of ``ops``: its own op, or an
    upstream layer it names as the source of its difference (a layer one side lacks, or
    what each side reads), from its ``causes`` (each node is "index:op")."""
    causes = {c.node.split(":", 1)[1] for c in finding.causes}
    return finding.op in ops or bool(causes & ops)


def reshaped_params(golden: Any, mutant: Any) -> dict[str, tuple[int, ...]]:
    """The parameters of ``mutant`` whose shape differs from the same-named parameter of
    ``golden`` (one framework's canonical models), with their new shapes."""
    before = golden.graph.params
    return {name: v.shape for name, v in mutant.graph.params.items()
            if name in before and before[name].shape != v.shape}


def names_mutated_layer(message: str, mutant: Any, reshaped: dict[str, Any],
                        ops: frozenset[str] | set[str]) -> bool:
    """Whether a TransferError message names a reshaped parameter read by a layer of one of
    ``ops`` (the error lists rhs parameters as ``name [shape]``)."""
    g = mutant.graph
    return any(f"{name} [" in message and any(r.op in ops for r in g.consumers(g.params[name]))
               for name in reshaped)
