"""The peer corpus benchmark: real models written by others, every cross-framework pair.

    python -m bench.peers [--archs bert,gpt2,...] [--pairs torch-flax,...] [--quiet]

Every ordered pair of frameworks of every architecture in ``bench/peer_models.py`` (HF
transformers' ports in PyTorch, TensorFlow and Flax, small configs, random weights; Keras
applications against their counterparts) is compared through the CLI's own code path
(``specgraph diff LHS RHS --format json``, in this process), and its findings held against
the genuine differences between the ports (``DISCOVERIES``, each found by specgraph and
checked by hand in the ports' code): a pair is expected equivalent unless one side has a
discovery the other lacks, and then expected to report exactly those. A pair ends in one of:

    right        the findings (code, op, attribute) are exactly the expected ones;
    false alarm  a finding that is not one of them;
    missed       an expected finding that is not reported;
    crash        any other exit (a trace error, an internal error) or an exception.

The last line reads ``peers: verdict right N/M, false alarms F/E, crashes C, median S s per
pair`` (E: the pairs expected equivalent).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

from bench.peer_models import ARCHS

MODELS = "bench/peer_models.py"



@dataclass(frozen=True)
class Discovery:
    """A genuine difference between ports: the framework whose port differs from the
    others', the finding that names it (code, op, attribute), and what it is, in words."""

    arch: str
    side: str
    code: str
    op: str
    attr: str | None
    what: str
    against: tuple[str, ...] | None = None  # the other sides it shows against (None: all)

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.code, self.op, self.attr)


def _padding_row(arch: str, where: str) -> Discovery:
    return Discovery(arch, "torch", "attr-mismatch", "embedding", "padding_idx",
                     f"PyTorch's {where} {'have' if 'and' in where else 'has'} padding_idx: "
                     "that row gets no gradient, where TensorFlow's and Flax's get one "
                     "(training only)")


DISCOVERIES: tuple[Discovery, ...] = (
    *(_padding_row(a, "word embeddings") for a in ("bert", "albert", "electra",
                                                   "distilbert", "opt", "gemma", "bert_padded",
                                                   "distilbert_padded", "opt_padded",
                                                   "gemma_mqa", "deberta_v2", "bigbird_sparse")),
    _padding_row("roberta", "word and position embeddings"),
    _padding_row("bart", "encoder and decoder token embeddings"),
    _padding_row("whisper", "decoder token embeddings"),
    *(_padding_row(a, "word embeddings") for a in ("xglm", "mpnet", "mobilebert", "xlm",
                                                   "esm", "convbert")),
    _padding_row("blenderbot_small", "encoder and decoder token embeddings"),
    *(_padding_row(a, "encoder and decoder token embeddings")
      for a in ("marian", "pegasus", "mbart")),
    *(Discovery(a, "tf", "gradient-divergence", "embedding", None,
                f"TF's {name} trains its sinusoidal position tables: add_weight without "
                "trainable=False, and the tf.stop_gradient of the table in call() is thrown "
                f"away ({where}), where PyTorch's are parameters with requires_grad=False "
                "(Flax's are constants: no parameter for specgraph to hold against TF's)",
                against=("torch",))
      for a, name, where in (("marian", "Marian", "modeling_tf_marian.py"),
                             ("pegasus", "Pegasus", "modeling_tf_pegasus.py"))),
    Discovery("xglm", "tf", "missing-op", "transpose", None,
              "TF's XGLM has an LM head of its own (keras Dense lm_head in "
              "modeling_tf_xglm.py), tied to the token embedding only when PyTorch weights "
              "are loaded (a rename), where PyTorch's and Flax's read the embedding's weight"),
    Discovery("electra", "flax", "edge-mismatch", "embedding", None,
              "Flax's ELECTRA, called without token_type_ids, looks up token type 1 where "
              "PyTorch's and TensorFlow's look up type 0 (modeling_flax_electra.py: "
              "jnp.ones_like(input_ids))"),
    Discovery("mistral", "flax", "attr-mismatch", "attention", "mask",
              "Flax's Mistral with sliding_window=None (as Mistral 7B v0.2 and later are "
              "configured) lets each token attend only to itself: it keeps "
              "jnp.triu(causal_mask, k=-(sliding_window or 0)), the diagonal of the causal "
              "mask (modeling_flax_mistral.py); PyTorch's and TensorFlow's are causal"),
    Discovery("mistral_window", "tf", "attr-mismatch", "attention", "mask",
              "TF's Mistral never reads config.sliding_window: its mask is causal where "
              "PyTorch's keeps a window of the last sliding_window keys "
              "(modeling_tf_mistral.py against create_sliding_window_causal_mask)"),
    Discovery("llama_theta", "flax", "attr-mismatch", "rotary_embedding", "theta",
              "Flax's Llama ignores config.rope_theta: its sin/cos tables are built with "
              "10000 (create_sinusoidal_positions in modeling_flax_llama.py, copied into "
              "Mistral's and Gemma's), so Llama 3's 500000 rotates by other angles"),
    Discovery("llama_rope_linear", "flax", "attr-mismatch", "rotary_embedding", "factor",
              "Flax's Llama ignores config.rope_scaling: its tables turn each position as "
              "is where PyTorch's divides the positions by the linear factor "
              "(modeling_flax_llama.py builds them from max_position_embeddings and "
              "rope_theta alone)"),
    Discovery("llama_bias", "flax", "attr-mismatch", "linear", "bias",
              "Flax's Llama ignores config.mlp_bias=True: its MLP's gate, up and down "
              "projections hard-code use_bias=False (modeling_flax_llama.py), where "
              "PyTorch's have biases; they start at zero, so only training shows it"),
    Discovery("vit_no_qkv_bias", "tf", "attr-mismatch", "linear", "bias",
              "TF's ViT ignores config.qkv_bias=False: its query, key and value Dense "
              "layers hard-code use_bias=True (modeling_tf_vit.py), where PyTorch's and "
              "Flax's leave the biases out; they start at zero, so only training shows it"),
    Discovery("resnet_v1", "torch", "attr-mismatch", "conv", "stride",
              "HF's TensorFlow and Flax ResNets ignore downsample_in_bottleneck=True: they "
              "stride in a bottleneck's 3x3 conv (v1.5) where PyTorch's, as asked, strides "
              "in its first 1x1 conv (v1)"),
    # Keras' ResNet50 against HF's v1 ResNet: the differences that are there on purpose
    Discovery("resnet50", "keras", "attr-mismatch", "conv", "bias",
              "Keras' ResNet50 gives every conv a bias, which HF's ResNet (a conv followed "
              "by BatchNorm) leaves out"),
    Discovery("resnet50", "keras", "attr-mismatch", "batch_norm", "eps",
              "Keras' ResNet50 uses BatchNorm eps 1.001e-5 where HF's ResNet uses 1e-5"),
    Discovery("resnet50", "keras", "attr-mismatch", "batch_norm", "momentum",
              "Keras' ResNet50 keeps Keras' BatchNorm momentum 0.99 (PyTorch's 0.01) where "
              "HF's ResNet uses PyTorch's 0.1: the running statistics train otherwise"),
    Discovery("convnext_tiny", "torch", "attr-mismatch", "layer_norm", "eps",
              "HF's ConvNeXt normalizes the pooled features with config.layer_norm_eps, "
              "1e-12 by default, where Keras' ConvNeXt, like the paper's code, uses 1e-6 as "
              "for every other LayerNorm (HF's own LayerNorms inside the network hard-code "
              "1e-6; modeling_convnext.py)"),
)


def expected(arch: str, lhs: str, rhs: str) -> set[tuple[str, str, str | None]]:
    """The findings a right verdict on this pair reports: the discoveries of one side that
    the other side does not share."""
    return {d.key for d in DISCOVERIES if d.arch == arch and (d.side == lhs) != (d.side == rhs)
            and (d.against is None or ({lhs, rhs} - {d.side}) <= set(d.against))}


@dataclass(frozen=True)
class Outcome:
    arch: str
    lhs: str
    rhs: str
    exit: int
    seconds: float
    found: frozenset[tuple[str, str, str | None]]
    detail: str

    @property
    def expected_equivalent(self) -> bool:
        return not expected(self.arch, self.lhs, self.rhs)

    @property
    def kind(self) -> str:
        if self.exit not in (0, 1):
            return "crash"
        want = expected(self.arch, self.lhs, self.rhs)
        if self.found == want and (self.exit == 1) == bool(want):
            return "right"
        if self.found - want:
            return "false alarm"
        return "missed"


def pairs(archs: list[str], only: set[str] | None) -> Iterator[tuple[str, str, str]]:
    for name in archs:
        for lhs, rhs in itertools.permutations(ARCHS[name].classes, 2):
            if only is None or f"{lhs}-{rhs}" in only:
                yield name, lhs, rhs


def run_pair(arch: str, lhs: str, rhs: str, extra: tuple[str, ...] = ()) -> Outcome:
    """One pair through ``specgraph diff --format json`` (with ``extra`` options)."""
    from specgraph.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["diff", f"{MODELS}:{arch}_{lhs}", f"{MODELS}:{arch}_{rhs}",
                         "--format", "json", *extra])
    except BaseException as exc:  # every outcome of a pair is scored, crashes included
        seconds = time.perf_counter() - start
        return Outcome(arch, lhs, rhs, -1, seconds, frozenset(), f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - start
    found: set[tuple[str, str, str | None]] = set()
    detail = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""
    with contextlib.suppress(ValueError):
        report = json.loads(out.getvalue())
        findings = report.get("findings", [])
        found = {(f["code"], f.get("op"), f.get("attr")) for f in findings}
        want = expected(arch, lhs, rhs)
        unexpected = [f["message"] for f in findings
                      if (f["code"], f.get("op"), f.get("attr")) not in want]
        detail = "; ".join(unexpected[:3]) or detail
    return Outcome(arch, lhs, rhs, code, seconds, frozenset(found), detail)


def summary(outcomes: list[Outcome]) -> str:
    right = sum(o.kind == "right" for o in outcomes)
    equivalent = [o for o in outcomes if o.expected_equivalent]
    alarms = sum(o.kind == "false alarm" for o in equivalent)
    crashes = sum(o.kind == "crash" for o in outcomes)
    median = statistics.median(o.seconds for o in outcomes) if outcomes else 0.0
    return (f"peers: verdict right {right}/{len(outcomes)}, false alarms "
            f"{alarms}/{len(equivalent)}, crashes {crashes}, median {median:.1f} s per pair")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHS),
                        help="architectures, comma-separated (default: all)")
    parser.add_argument("--pairs", default=None,
                        help="framework pairs, e.g. torch-flax,flax-torch (default: all)")
    parser.add_argument("--quiet", action="store_true", help="print the summary only")
    parser.add_argument("--replay", action="store_true",
                        help="numbers from each side's canonical graph replayed layer by "
                             "layer, not from its own program")
    args = parser.parse_args()
    only = set(args.pairs.split(",")) if args.pairs else None
    outcomes = []
    for arch, lhs, rhs in pairs(args.archs.split(","), only):
        outcome = run_pair(arch, lhs, rhs, ("--replay",) if args.replay else ())
        outcomes.append(outcome)
        if not args.quiet:
            print(f"{outcome.kind:11s} {arch} {lhs}->{rhs} (exit {outcome.exit}, "
                  f"{outcome.seconds:.1f} s){': ' + outcome.detail[:300] if outcome.kind != 'right' else ''}",
                  flush=True)
    print(summary(outcomes))


if __name__ == "__main__":
    main()
