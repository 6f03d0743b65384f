"""The numeric comparison end to end: equivalent pairs agree forward and backward over many
seeds, planted PyTorch kernel faults are found at their layer with the right side blamed,
NaNs and nondeterminism are reported where they start, and each context runs."""

from __future__ import annotations

import runpy
import subprocess
import sys

import numpy as np
import pytest

from specgraph.check import compare
from specgraph.ir import GraphBuilder
from specgraph.model import TracedModel
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.runner import Context
from specgraph.passes import canonicalize_model
from specgraph.testing import assert_equivalent
from specgraph.transfer import TransferError

torch = pytest.importorskip("torch")
pytest.importorskip("jax")

from tests.test_golden_equivalence import GOLDEN, _canonical, _variant  # noqa: E402
from tests.zoo import traced  # noqa: E402
from tests.zoo.torch_faults import (  # noqa: E402
    _cpu_kernel, inf_gelu_backward, wrong_gelu_backward, wrong_softmax, wrong_weight_gradient)


_torch, _jax = traced.torch_model, traced.jax_model


def _seeds(n: int) -> NumericOptions:
    return NumericOptions(seeds=tuple(range(n)))


# --- no false alarms -------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["jax", "linen", "nnx", "keras"])
@pytest.mark.parametrize("golden", sorted(GOLDEN))
@pytest.mark.parametrize("native", [False, True], ids=["replay", "native"])
def test_golden_pairs_agree_forward_and_backward(golden: str, variant: str,
                                                 native: bool) -> None:
    lhs, rhs = _canonical("torch", GOLDEN[golden][0]), _variant(golden, variant)
    report = compare(lhs, rhs, options=NumericOptions(seeds=(0, 1, 2, 3), native=native))
    assert report.equivalent, [f.message for f in report.findings]
    n = report.numeric
    assert n.seeds == (0, 1, 2, 3)
    weighted = [layer for layer in n.layers if layer.lhs.split()[0] in ("linear", "conv")]
    with_backward = [layer for layer in weighted if layer.backward is not None]
    if native:  # a Flax DenseGeneral's [B, T, H, D] output has no native value [B, T, H·D]
        assert len(with_backward) >= 0.5 * len(weighted)
    else:
        assert n.layers and with_backward == weighted
    # an attention key's bias has a zero gradient in exact arithmetic (softmax ignores a
    # shift along the keys): what both sides give there is rounding noise, not compared
    top = max(s.scale for s in n.gradients.values())
    real = [s for s in n.gradients.values() if s.scale > 1e-3 * top]
    assert real and max(s.max_rel for s in real) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["jax", "linen", "nnx", "keras"])
@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_golden_pairs_agree_over_twenty_seeds_both_ways(golden: str, variant: str) -> None:
    lhs, rhs = _canonical("torch", GOLDEN[golden][0]), _variant(golden, variant)
    for a, b in ((lhs, rhs), (rhs, lhs)):
        report = compare(a, b, options=_seeds(20))
        assert report.equivalent, [f.message for f in report.findings]


def test_onnx_export_agrees_with_shared_weights() -> None:
    from tests.frontends.onnx.test_equivalence import _export

    report = compare(_torch("transformer_block"), _export("transformer_block", False),
                     options=NumericOptions(seeds=(0, 1), transfer=False))
    assert report.equivalent, [f.message for f in report.findings]
    assert any("gradients not compared" in n for n in report.numeric.notes)


def test_weights_not_moved_that_differ_are_a_divergence_at_their_layer() -> None:
    """Without moving weights (``--no-transfer``), two copies of one network that hold other
    weights part at their first layer; fed lhs's inputs and weights the layer agrees, and
    that must not read as rounding that accumulated (it did: EQUIVALENT, with a note per
    layer about values 3x their scale apart)."""
    from specgraph.frontends import torch as torch_frontend

    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)

    def copy(seed: int) -> TracedModel:
        torch.manual_seed(seed)
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                  torch.nn.Linear(8, 4))
        return torch_frontend.trace(net, (torch.from_numpy(x),), reference=f"copy{seed}")

    report = compare(copy(0), copy(1), options=NumericOptions(transfer=False))
    assert not report.equivalent
    (finding,) = report.findings
    assert finding.code == "numeric-divergence" and "linear" in finding.message
    assert "rhs holds weights of its own here (0.bias, 0.weight)" in finding.message
    assert compare(copy(0), copy(0), options=NumericOptions(transfer=False)).equivalent


# --- planted framework faults ------------------------------------------------------------


@pytest.mark.parametrize("torch_side", ["lhs", "rhs"])
@pytest.mark.parametrize(("model", "fault", "code", "op"), [
    ("wide_classifier", wrong_softmax, "numeric-divergence", "softmax"),
    ("gelu_mlp", wrong_gelu_backward, "gradient-divergence", "gelu"),
], ids=["softmax_forward", "gelu_backward"])
@pytest.mark.parametrize("native", [False, True], ids=["replay", "native"])
def test_planted_torch_kernel_fault_is_found_and_blamed(model, fault, code, op,
                                                        torch_side, native) -> None:
    # natively, the fault is hit where the model's own exported program reaches the kernel
    pair = (_torch(model), _jax(f"{model}/jax"))
    lhs, rhs = pair if torch_side == "lhs" else pair[::-1]
    options = NumericOptions(native=native)
    assert compare(lhs, rhs, options=options).equivalent
    with fault():
        report = compare(lhs, rhs, options=options)
    assert [f.code for f in report.findings] == [code]
    finding = report.findings[0]
    assert finding.op == op and finding.blame == torch_side
    assert f"{torch_side} (torch) leaves the fp64 reference" in finding.message
    assert compare(lhs, rhs, options=options).equivalent  # the kernel is restored


@pytest.mark.parametrize("torch_side", ["lhs", "rhs"])
@pytest.mark.parametrize(("fault", "op", "said"), [
    (wrong_weight_gradient, "linear", "fc2"),
    (inf_gelu_backward, "gelu", "NaN or Inf where the other has none"),
], ids=["weight_gradient", "inf_gradient"])
def test_a_gradient_fault_in_the_program_is_found_and_blamed(fault, op, said,
                                                             torch_side) -> None:
    """Only a parameter's gradient is wrong (fc2's weight, made by ``mm`` in eager autograd):
    the judge holds each program's own weight gradient against the other's, not only the
    input gradient, so this is no difference that 'comes from the gradients that reached it'. (The replay
    computes that gradient with another product, so only the program meets the fault.)
    gelu's backward writes Inf where JAX's gradient is finite: there is no derivative to
    take along that difference (the judge divided by a zero step), the side with the Inf is
    the one off, and the NaN the Inf makes in fc1's backward (Inf·0) is no finding of its
    own."""
    pair = (_torch("gelu_mlp"), _jax("gelu_mlp/jax"))
    lhs, rhs = pair if torch_side == "lhs" else pair[::-1]
    with fault():
        report = compare(lhs, rhs, options=NumericOptions())
    assert [(f.code, f.op, f.blame) for f in report.findings] == [
        ("gradient-divergence", op, torch_side)]
    assert said in report.findings[0].message
    assert not any("gradients that reached it" in n for n in report.numeric.notes)
    assert compare(lhs, rhs, options=NumericOptions()).equivalent


def test_softmax_fault_below_its_threshold_is_not_reported() -> None:
    """1030 classes trigger the planted fault; the same model with 1028 does not."""
    with wrong_softmax():
        assert compare(_torch("gelu_mlp"), _jax("gelu_mlp/jax")).equivalent


def test_repro_scripts_show_the_fault_alone(tmp_path) -> None:
    lhs, rhs = _torch("wide_classifier"), _jax("wide_classifier/jax")
    with wrong_softmax():
        report = compare(lhs, rhs, options=NumericOptions(repro=tmp_path))
        written = report.numeric.repro
        assert len(written) == 3 and (tmp_path / "case.npz").exists()
        with pytest.raises(SystemExit) as exit_torch:
            runpy.run_path(str(tmp_path / "repro_torch.py"), run_name="__main__")
    assert exit_torch.value.code == 1
    # in a fresh process, without the planted kernel, both frameworks are right
    for name in ("repro_torch.py", "repro_jax.py"):
        done = subprocess.run([sys.executable, str(tmp_path / name)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "max error" in done.stdout
    source = (tmp_path / "repro_torch.py").read_text()
    assert "specgraph" not in source.split('"""', 2)[2]


def test_gradient_repro_reproduces_the_backward_fault(tmp_path) -> None:
    with wrong_gelu_backward():
        report = compare(_torch("gelu_mlp"), _jax("gelu_mlp/jax"),
                         options=NumericOptions(repro=tmp_path))
        assert report.numeric.repro
        with pytest.raises(SystemExit) as exit_torch:
            runpy.run_path(str(tmp_path / "repro_torch.py"), run_name="__main__")
    assert exit_torch.value.code == 1
    done = subprocess.run([sys.executable, str(tmp_path / "repro_jax.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# --- NaN, nondeterminism, isolation ------------------------------------------------------


def _tiny(framework: str, plus_one: bool) -> TracedModel:
    """y = log(relu(x) [+ 1]): without the +1, log(0) = -inf."""
    b = GraphBuilder("tiny")
    x = b.input("x", (2, 3), "float32")
    h = b.add("relu", [x], shape=(2, 3), dtype="float32", scope="act")
    if plus_one:
        h = b.add("add", [h, b.constant(np.float32(1.0))], shape=(2, 3), dtype="float32",
                  scope="shift")
    b.output("y", b.add("log", [h], shape=(2, 3), dtype="float32", scope="log"))
    inputs = {"x": np.array([[-1.0, 2.0, 0.5], [3.0, -2.0, 1.0]], np.float32)}
    return TracedModel(b.build(), {}, inputs, {}, framework, f"tiny-{plus_one}")


def test_nan_introduced_names_the_layer_and_side() -> None:
    report = compare(_tiny("torch", True), _tiny("jax", False), mode="numbers")
    codes = {f.code: f for f in report.findings}
    assert "nan-introduced" in codes
    nan = codes["nan-introduced"]
    assert nan.blame == "rhs" and nan.op == "log" and nan.rhs.scope == "log"


def test_nondeterministic_kernel_is_found_with_repeat() -> None:
    def noisy(original):
        def kernel(keyset, x):
            return original.call_boxed(keyset, x) + torch.rand_like(x) * 1e-3
        return kernel

    lhs, rhs = _jax("gelu_mlp/jax"), _torch("gelu_mlp")
    options = NumericOptions(rhs_context=Context(repeat=3), backward=False)
    with _cpu_kernel("aten::gelu", noisy):
        report = compare(lhs, rhs, options=options)
    found = [f for f in report.findings if f.code == "nondeterminism"]
    assert found and found[0].blame == "rhs" and found[0].op == "gelu"


def test_repeat_reruns_the_models_own_program() -> None:
    """--repeat with the programs giving the numbers runs each program again whole and
    compares it with itself: a deterministic model is not called nondeterministic because
    the program and a kernel of the replay round differently."""
    lhs, rhs = _jax("gelu_mlp/jax"), _torch("gelu_mlp")
    options = NumericOptions(lhs_context=Context(repeat=3), rhs_context=Context(repeat=3))
    report = compare(lhs, rhs, options=options)
    assert not [f for f in report.findings if f.code == "nondeterminism"]
    assert report.equivalent, [f.message for f in report.findings]


def test_isolated_mode_measures_each_layer_alone() -> None:
    from tests.zoo.torch_mutants import mutant

    from specgraph.frontends import torch as frontend

    eps = canonicalize_model(frontend.trace(*mutant("transformer_block", "eps"),
                                            reference="eps"))
    golden = _torch("transformer_block")
    report = compare(golden, eps, mode="numbers",
                     options=NumericOptions(isolated=True, backward=False))
    assert [(f.code, f.op, f.rhs.scope) for f in report.findings] == [
        ("numeric-divergence", "layer_norm", "ln1")]
    assert "defined differently" in report.findings[0].message
    assert all(layer.isolated is not None for layer in report.numeric.layers)
    # end to end, the same difference only stands out two layers later, and is traced back
    report = compare(golden, eps, mode="numbers", options=NumericOptions(backward=False))
    assert [(f.op, f.rhs.scope) for f in report.findings] == [("layer_norm", "ln1")]


# --- contexts and API --------------------------------------------------------------------


@pytest.mark.parametrize("rhs_context", ["cpu,compiled", "cpu,bfloat16", "cpu,float16"])
def test_same_model_under_two_contexts(rhs_context: str) -> None:
    model = _jax("mlp/jax")
    assert_equivalent(model, model, rhs_context=rhs_context, seeds=2)


def test_low_precision_context_relaxes_tolerance_but_still_finds_bugs() -> None:
    with wrong_softmax():
        report = compare(_jax("wide_classifier/jax"), _torch("wide_classifier"),
                         options=NumericOptions(rhs_context=Context(dtype="bfloat16")))
    assert [f.code for f in report.findings] == ["numeric-divergence"]
    assert report.findings[0].blame == "rhs"


def test_assert_equivalent_fails_with_the_findings_in_words() -> None:
    with wrong_softmax(), pytest.raises(AssertionError, match="blame: rhs"):
        assert_equivalent(_jax("wide_classifier/jax"), _torch("wide_classifier"))


def test_transfer_error_lists_what_cannot_be_moved() -> None:
    from tests.zoo.torch_mutants import mutant

    from specgraph.frontends import torch as frontend

    wider = canonicalize_model(frontend.trace(*mutant("transformer_block", "hidden_size"),
                                              reference="wider"))
    with pytest.raises(TransferError, match="no lhs parameter plays the role of"):
        compare(_torch("transformer_block"), wider, mode="numbers")
    # by default numbers are skipped with a note when structure already differs
    report = compare(_torch("transformer_block"), wider)
    assert report.numeric is None and report.findings


def test_json_report_carries_the_numbers() -> None:
    from specgraph.renderers import get_renderer

    report = compare(_torch("mlp"), _jax("mlp/jax"))
    text = get_renderer("json").render(report)
    again = get_renderer("json").render(compare(_torch("mlp"), _jax("mlp/jax")))
    assert text == again
    assert '"numeric": {' in text and '"gradients"' in text


def test_rounding_past_the_tolerance_in_a_few_elements_is_no_divergence():
    """EfficientNetV2's BatchNorm gradients: 0.09% of elements apart by 6e-5 of their
    scale, cosine 1, both sides as far from the fp64 reference of one definition."""
    from specgraph.numeric.findings import Verdict
    from specgraph.numeric.localize import _rounding
    from specgraph.numeric.stats import Stats

    def stats(mismatch, max_rel, cosine):
        return Stats(1e-8, max_rel, mismatch, cosine, 1.0)

    assert _rounding(Verdict("unknown", "both"), stats(0.0009, 6e-5, 1.0))
    assert not _rounding(Verdict("rhs", "kernel"), stats(0.0009, 6e-5, 1.0))
    assert not _rounding(Verdict("unknown", "definition"), stats(0.0009, 6e-5, 1.0))
    assert not _rounding(Verdict("unknown", "both"), stats(0.2, 6e-5, 1.0))
    assert not _rounding(Verdict("unknown", "both"), stats(0.0009, 3e-2, 0.9995))
