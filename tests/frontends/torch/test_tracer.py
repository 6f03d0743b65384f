"""PyTorch frontend behaviour: names, layouts, scopes, sources, pytrees, modes, odd ops."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from specgraph.errors import FactoryError, TraceError
from specgraph.frontends import torch as torch_frontend
from specgraph.interpreter import run
from tests.zoo import torch_models
from tests.zoo.torch_models import MODELS


def _trace(name: str):
    model, inputs = MODELS[name]()
    return model, torch_frontend.trace(model, inputs, reference=name)


def _check_faithful(traced, tol: float = 1e-5) -> None:
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, want in traced.outputs.items():
        np.testing.assert_allclose(got[key], want, rtol=tol, atol=tol * np.abs(want).max())


def test_params_keep_state_dict_names_in_canonical_layout() -> None:
    model, traced = _trace("mlp")
    assert list(traced.graph.params) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                         "fc3.weight", "fc3.bias"]
    np.testing.assert_array_equal(traced.weights["fc1.weight"],
                                  model.fc1.weight.detach().numpy().T)
    assert traced.graph.params["fc1.weight"].shape == (6, 16)


def test_buffers_become_params_and_unused_ones_are_left_out() -> None:
    _, traced = _trace("cnn")
    assert "bn1.running_mean" in traced.graph.params
    assert "bn1.running_var" in traced.graph.params
    assert "bn1.num_batches_tracked" not in traced.graph.params
    bn = next(n for n in traced.graph.nodes if n.scope == "bn2")
    assert bn.op == "batch_norm" and bn.attrs["eps"] == 1e-3


def test_scope_and_source_point_at_the_user_code() -> None:
    _, traced = _trace("mlp")
    forward_lines, start = inspect.getsourcelines(torch_models.MLP.forward)
    fc1_line = start + next(i for i, line in enumerate(forward_lines) if "self.fc1" in line)
    linear = traced.graph.nodes[0]
    assert (linear.op, linear.scope, linear.origin) == ("linear", "fc1", "aten.linear.default")
    assert linear.source.endswith(f"torch_models.py:{fc1_line}")
    tanh = next(n for n in traced.graph.nodes if n.op == "tanh")
    assert tanh.scope == ""  # a functional call in the model's own forward


def test_nested_scopes_use_module_paths() -> None:
    _, traced = _trace("preln_block")
    scopes = {n.scope for n in traced.graph.nodes}
    assert {"ln1", "attn", "ln2", "mlp.0", "mlp.1", "mlp.2"} <= scopes


def test_pytree_inputs_and_dataclass_outputs_are_named_by_path() -> None:
    _, traced = _trace("dict_io")
    assert traced.graph.input_names == ("batch.x", "batch.y")
    assert traced.graph.output_names == ("logits", "features")
    _check_faithful(traced)


def test_traces_in_eval_mode_and_keeps_dropout_probability() -> None:
    model, inputs = MODELS["dict_io"]()
    model.train()
    traced = torch_frontend.trace(model, inputs, reference="dict_io")
    (drop,) = [n for n in traced.graph.nodes if n.op == "dropout"]
    assert drop.attrs["p"] == 0.3
    _check_faithful(traced)  # eval mode: the dropout is the identity
    # the caller's model is left in the mode it was given in, and the trace says what it did
    assert model.training
    (note,) = traced.notes
    assert "handed over in training mode" in note and "eval mode" in note, note


def test_a_model_in_training_mode_is_given_back_in_it_module_by_module() -> None:
    """A training script that checks its model between steps must not find it switched to
    eval mode (its dropout off from then on); a layer the user froze in eval mode stays so."""
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    model.train()
    model[1].eval()  # a frozen batch norm inside a model being trained
    before = [m.training for m in model.modules()]
    traced = torch_frontend.trace(model, (torch.randn(4, 8),), reference="mixed")
    assert [m.training for m in model.modules()] == before
    (note,) = traced.notes
    assert "(2)" in note, note  # the dropout in training mode is named, the frozen norm not
    out = model(torch.ones(4, 8))  # training mode still: the dropout zeroes elements
    assert (out != model.eval()(torch.ones(4, 8))).any()
    evaluated = torch_frontend.trace(model, (torch.randn(4, 8),), reference="eval")
    assert evaluated.notes == () and not model.training
    from specgraph.check import compare

    report = compare(traced, evaluated, mode="structure")
    assert report.equivalent and report.notes[0] == f"lhs: {note}", report.notes


def test_gelu_approximation_and_attention_attributes_are_explicit() -> None:
    _, traced = _trace("causal_sdpa")
    (att,) = [n for n in traced.graph.nodes if n.op == "attention"]
    assert att.attrs["causal"] is True and att.attrs["scale"] == pytest.approx(1 / np.sqrt(8))
    _, block = _trace("preln_block")
    (gelu,) = [n for n in block.graph.nodes if n.op == "gelu"]
    assert gelu.attrs["approximate"] == "none"


IDS = torch.from_numpy(np.random.default_rng(0).integers(0, 5, (2, 6)))


def test_a_number_read_off_the_data_for_an_assert_is_no_node() -> None:
    """It crashed the tracer (exit 3: an opaque node with no tensor output)."""
    x = torch.randn(2, 4)
    traced = torch_frontend.trace(torch_models.LengthsChecked(), (IDS, x), reference="lengths")
    assert [n.op for n in traced.graph.nodes] == ["linear"]
    _check_faithful(traced)
    with pytest.raises(TraceError, match=r"\.item\(\).*keep it a tensor"):
        torch_frontend.trace(torch_models.LengthsChecked(use=True), (IDS, x),
                             reference="lengths_used")


def test_glu_is_its_halves_gated_by_a_sigmoid() -> None:
    """``F.glu`` (Speech2Text's subsampler) was opaque: no numbers, false findings against
    the TF port's ``split``, ``sigmoid``, ``mul``."""

    class Glu(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.glu(x, dim=1)

    x = torch.randn(2, 6, 3)
    traced = torch_frontend.trace(Glu(), (x,), reference="glu")
    assert [n.op for n in traced.graph.nodes] == ["split", "sigmoid", "mul"]
    got = run(traced.graph, traced.inputs, traced.weights)
    np.testing.assert_allclose(got[traced.graph.output_names[0]], F.glu(x, dim=1).numpy(),
                               rtol=1e-6, atol=1e-7)


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h += 1.5
        h = self.act(h)
        h.mul_(2)
        return h


class TiedWeights(nn.Module):
    """Embedding and output projection share one matrix, as in GPT-2."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(11, 6)
        self.lm_head = nn.Linear(6, 11, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.tanh(self.wte(ids)))


class ScalarsAndMasks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(5, 5, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = (x @ x.transpose(-1, -2)) / 3.0
        s = s.masked_fill(~self.mask, float("-inf")).softmax(-1)
        y = 2.0 - s * 0.5 + torch.arange(5.0)
        y = torch.clamp(y, min=1.6).pow(2).sum(dim=-1, keepdim=True)
        return torch.cat([y, y.new_ones(y.shape)], dim=-1)[..., 0].unsqueeze(0)


class ComplexArithmetic(nn.Module):
    """Pairs as complex numbers: a product with a constant ``polar`` (folded), one with a
    ``polar`` of the input, a real factor, a complex and a real sum, back to real pairs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.view_as_complex(x.reshape(2, 3, 2))
        turn = torch.polar(torch.ones(3), torch.arange(3.0) * 0.7)
        w = z * turn * torch.polar(x[0, :3].abs() + 1, x[1, :3]) * 0.5
        w = (w + z - 2.0) * torch.arange(1.0, 4.0)
        return torch.view_as_real(w - z * 1j).flatten(1)


@pytest.mark.parametrize(
    ("module", "inputs"),
    [
        (InPlace, (torch.randn(3, 4),)),
        (TiedWeights, (torch.randint(0, 11, (2, 3)),)),
        (ScalarsAndMasks, (torch.randn(2, 5, 5),)),
        (ComplexArithmetic, (torch.randn(2, 6),)),
    ],
    ids=["in_place", "tied_weights", "scalars_and_masks", "complex_arithmetic"],
)
def test_awkward_models_are_faithful(module, inputs) -> None:
    torch.manual_seed(0)
    traced = torch_frontend.trace(module(), inputs, reference=module.__name__)
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    _check_faithful(traced)


def test_tied_weight_is_one_param_used_in_two_layouts() -> None:
    torch.manual_seed(0)
    traced = torch_frontend.trace(TiedWeights(), (torch.randint(0, 11, (2, 3)),))
    assert list(traced.graph.params) == ["wte.weight"]
    assert [n.op for n in traced.graph.nodes].count("transpose") == 1


def test_weight_norm_parametrization_is_weight_norm() -> None:
    """wav2vec2's positional conv: weight = g·v/‖v‖ over every axis but 2, parameters g
    and v (PyTorch names them original0 and original1)."""
    torch.manual_seed(0)
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 6, 3, groups=2), dim=2)
    traced = torch_frontend.trace(conv, (torch.randn(2, 4, 9),))
    (wn,) = [n for n in traced.graph.nodes if n.op == "weight_norm"]
    assert wn.attrs["axes"] == (0, 1)
    assert [traced.graph.param_name(v) for v in wn.inputs] == [
        "parametrizations.weight.original1", "parametrizations.weight.original0"]
    _check_faithful(traced)


class _RelativeBias(nn.Module):
    """Swin's relative position bias: rows of a table picked by an index buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(7, 2))
        self.register_buffer("index", torch.tensor([[0, 3], [6, 3]]))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores + self.table[self.index.view(-1)].view(2, 2, 2).permute(2, 0, 1)


def test_rows_of_a_table_picked_by_index_are_an_embedding_as_in_tf_and_jax() -> None:
    torch.manual_seed(0)
    traced = torch_frontend.trace(_RelativeBias(), (torch.randn(3, 2, 2, 2),))
    (lookup,) = [n for n in traced.graph.nodes if n.op == "embedding"]
    assert traced.graph.param_name(lookup.inputs[1]) == "table"
    assert lookup.inputs[0] in traced.graph.constants  # an integer buffer is a constant
    _check_faithful(traced)


class _PairIndex(nn.Module):
    """``x[rows, cols]`` with index tensors computed from the input, broadcast together,
    negative ones counting from the end."""

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        rows = ids[:, :1] - 2  # from -2
        cols = ids[None, 0, :]
        return x[rows, cols] * 2.0


def test_indexing_leading_axes_with_several_tensors_is_one_gather() -> None:
    x = torch.randn(3, 5, 4)
    ids = torch.tensor([[1, 4, 0], [2, 3, 3]])
    traced = torch_frontend.trace(_PairIndex(), (x, ids))
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    gathers = [n for n in traced.graph.nodes if n.op == "gather"
               and n.inputs[0].shape == (15, 4)]  # x's leading axes as one
    assert len(gathers) == 1
    _check_faithful(traced)
    other = torch.tensor([[4, 1, 2], [0, 0, 4]])  # other indices, the same graph
    got = run(traced.graph, {**traced.inputs, "ids": other.numpy()}, traced.weights)
    np.testing.assert_array_equal(list(got.values())[0], (_PairIndex()(x, other)).numpy())


class _Ands(nn.Module):
    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        kept = (ids > 4) & (ids < 10)  # booleans: logical
        return x * kept.float() + x * (ids & 6).float()  # integers: bitwise


def test_and_of_booleans_is_logical_and_of_integers_is_not() -> None:
    traced = torch_frontend.trace(_Ands(), (torch.ones(1, 4), torch.tensor([[5, 6, 7, 12]])))
    ops = [n.op for n in traced.graph.nodes]
    assert ops.count("logical_and") == 1
    (opaque,) = [n for n in traced.graph.nodes if n.op == "opaque"]
    assert "bitwise_and" in opaque.attrs["target"] or "and" in opaque.attrs["target"]


class _Vmapped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda row: self.fc(row) * row.sum())(x)


def test_vmap_over_the_inputs_is_a_clear_error_that_leaves_vmap_as_it_was() -> None:
    with pytest.raises(TraceError, match="torch.vmap on values computed from its inputs"):
        torch_frontend.trace(_Vmapped(), (torch.randn(3, 4),), reference="vmapped")
    assert torch.vmap(torch.sin)(torch.zeros(2)).shape == (2,)  # no level left behind


@torch.library.custom_op("specgraph_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-1) * 3


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(mystery(self.fc(x)))


def test_unknown_op_becomes_opaque_node_with_its_origin() -> None:
    traced = torch_frontend.trace(UsesCustomOp(), (torch.randn(2, 3),))
    (node,) = [n for n in traced.graph.nodes if n.op == "opaque"]
    assert node.attrs["target"] == "specgraph_test.mystery.default"
    assert node.outputs[0].shape == (2, 3)
    assert [n.op for n in traced.graph.nodes] == ["linear", "opaque", "relu"]


class DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x


class Broken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(7, 2)


def test_export_failure_is_one_sentence_naming_the_model() -> None:
    with pytest.raises(TraceError,
                       match=r"^ddc: torch\.export could not trace the model: .*--debug"):
        torch_frontend.trace(DataDependent(), (torch.randn(3),), reference="ddc")


def test_model_that_raises_on_its_inputs() -> None:
    with pytest.raises(TraceError, match=r"^broken: the model raised RuntimeError"):
        torch_frontend.trace(Broken(), (torch.randn(2, 3),), reference="broken")


def test_example_inputs_must_be_a_tuple() -> None:
    with pytest.raises(FactoryError, match="example_inputs must be a tuple"):
        torch_frontend.trace(nn.ReLU(), [torch.randn(2)], reference="list")


def test_single_tensor_and_numpy_inputs_are_accepted() -> None:
    traced = torch_frontend.trace(nn.Tanh(), np.ones((2, 2), dtype=np.float32))
    assert traced.graph.input_names == ("input",) and traced.graph.nodes[0].op == "tanh"


class _MaskWrittenInPlace(nn.Module):
    """HF OPT's padded mask: a causal mask cloned, then overwritten with ``copy_`` (whole,
    or, with ``part``, only a slice of it; ``part="transposed"``: a slice of its transpose)."""

    def __init__(self, part: bool | str = False) -> None:
        super().__init__()
        self.part = part

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        causal = torch.triu(torch.full((t, t), -1e9), diagonal=1)[None, None].expand(
            x.shape[0], 1, t, t).clone()
        padded = causal.masked_fill(mask[:, None, None, :] == 0, -1e9)
        if self.part == "transposed":
            causal.transpose(2, 3)[:, :, :, : t - 1] = padded[:, :, :, : t - 1]
        elif self.part:
            causal[:, :, :, : t - 1] = padded[:, :, :, : t - 1]
        else:
            causal.copy_(padded)
        return torch.softmax(x[:, None] @ x[:, None].transpose(-1, -2) + causal, dim=-1)


def test_a_tensor_of_its_own_overwritten_in_place_is_what_was_written() -> None:
    x = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    traced = torch_frontend.trace(_MaskWrittenInPlace(), (x, mask), reference="in-place")
    assert [n.op for n in traced.graph.nodes if n.op == "opaque"] == []
    _check_faithful(traced)


def test_a_write_into_a_slice_is_what_was_written() -> None:
    """``x[..., :k] = y`` changes ``x`` through a view of it: later reads of ``x`` read the
    write, ``where`` over the elements written."""
    x = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    part = torch_frontend.trace(_MaskWrittenInPlace(part=True), (x, mask),
                                reference="in-place-slice")
    assert [n.op for n in part.graph.nodes if n.op == "opaque"] == []
    (add,) = [n for n in part.graph.nodes if n.op == "add"]
    assert "where" in {part.graph.producer(v).op for v in add.inputs if part.graph.producer(v)}
    _check_faithful(part)


def test_a_write_into_a_view_is_never_lost() -> None:
    """Through a view other than selects and slices (a transpose), later reads of ``x`` are
    an opaque value (an error where it is run), never ``x`` as it was before the write."""
    x = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    part = torch_frontend.trace(_MaskWrittenInPlace(part="transposed"), (x, mask),
                                reference="in-place-transposed")
    (add,) = [n for n in part.graph.nodes if n.op == "add"]
    readers = {part.graph.producer(v).op for v in add.inputs if part.graph.producer(v)}
    assert "opaque" in readers
    with pytest.raises(Exception, match="opaque"):
        run(part.graph, part.inputs, part.weights)


def test_a_model_that_writes_into_a_view_is_exit_2_in_one_sentence(tmp_path, capsys) -> None:
    """Where specgraph cannot follow a write into a view, ``diff`` says so and exits 2
    (never a comparison of the tensor as it was before the write)."""
    from specgraph.cli import main

    models = tmp_path / "models.py"
    models.write_text(
        "import torch\n"
        "from tests.frontends.torch.test_tracer import _MaskWrittenInPlace\n\n\n"
        "def part():\n"
        "    return _MaskWrittenInPlace(part='transposed'), (torch.randn(2, 4, 3),\n"
        "                                         torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]))\n")
    code = main(["diff", f"{models}:part", f"{models}:part"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("specgraph: error:") and "copy_" in err[0]


def test_an_input_given_as_none_is_no_input_and_the_program_runs_without_it(tmp_path, capsys
                                                                              ) -> None:
    """``WhisperModel(features, None, decoder_ids)``: an example input of None (a mask not
    passed) crashed the tracer, and the program then fed the next input in its place."""
    from specgraph.cli import main

    class Skip(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.fc = nn.Linear(4, 2)

        def forward(self, x, mask=None, y=None):
            h = self.fc(x)
            return h if y is None else h + y

    x, y = torch.randn(2, 4), torch.randn(2, 2)
    traced = torch_frontend.trace(Skip().eval(), (x, None, y))
    assert [v.shape for v in traced.graph.inputs] == [(2, 4), (2, 2)]
    assert list(traced.graph.input_names) == ["x", "y"]
    path = tmp_path / "optional.py"
    path.write_text("import torch\nfrom torch import nn\n\n\n"
                    "class Skip(nn.Module):\n"
                    "    def __init__(self):\n        super().__init__()\n"
                    "        self.fc = nn.Linear(4, 2)\n\n"
                    "    def forward(self, x, mask=None, y=None):\n"
                    "        h = self.fc(x)\n        return h if y is None else h + y\n\n\n"
                    "def make():\n    torch.manual_seed(0)\n"
                    "    return Skip().eval(), (torch.randn(2, 4), None, torch.randn(2, 2))\n")
    assert main(["diff", f"{path}:make", f"{path}:make", "--rhs-context", "compiled"]) == 0
    assert "EQUIVALENT" in capsys.readouterr().out


def test_a_model_that_returns_a_key_value_cache_is_told_to_leave_it_off() -> None:
    """HF's GPT-2 with its default ``use_cache=True`` returns a ``DynamicCache``; the error
    quoted torch.export's pytree registration text."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                                     n_positions=16)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    with pytest.raises(TraceError, match="returns a key/value cache .*DynamicCache.*"
                                         "use_cache=False"):
        torch_frontend.trace(model, (torch.randint(0, 50, (1, 6)),))
