"""Odd but valid models get a verdict, not a crash: a chain of hundreds of elementwise ops, a
matrix times a vector, an attribute that is infinite."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from specgraph.cli import main  # noqa: E402

MODELS = '''
import torch


class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        x = self.fc(x)
        for i in range(400):
            x = torch.sin(x) + 0.5 if i % 2 else x * 1.01
        return x


class MatVec(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.v = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x @ self.v


class Clamp(torch.nn.Module):
    def __init__(self, high):
        super().__init__()
        self.high = high
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.clamp(self.fc(x), max=self.high)


class Sqrt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.sqrt(self.fc(x))


def sqrt():
    torch.manual_seed(0)
    return Sqrt(), (torch.randn(3, 4),)


class Magnitude(torch.nn.Module):
    def forward(self, x, p):
        return torch.sqrt(x) * torch.log(1 - p)


def magnitude():
    torch.manual_seed(0)
    return Magnitude(), (torch.rand(3, 4) * 5, torch.rand(3, 4))


def nothing():
    class Nothing(torch.nn.Module):
        def forward(self, x):
            return None

    return Nothing(), (torch.randn(2),)


def chain():
    torch.manual_seed(0)
    return Chain(), (torch.randn(2, 4),)


def matvec():
    torch.manual_seed(0)
    return MatVec(), (torch.randn(3, 4),)


def clamp_inf():
    torch.manual_seed(0)
    return Clamp(float("inf")), (torch.randn(3, 4),)


def clamp_6():
    torch.manual_seed(0)
    return Clamp(6.0), (torch.randn(3, 4),)
'''


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "odd.py"
    path.write_text(MODELS)
    return path


def test_a_chain_of_hundreds_of_ops_prints_its_equations(models, capsys):
    assert main(["show", f"{models}:chain"]) == 0
    equations = capsys.readouterr().out.split("Equations")[1]
    assert "output = " in equations and "h2 = " in equations  # named values, not one expression
    assert main(["show", f"{models}:chain", "--format", "latex"]) == 0


def test_a_matrix_times_a_vector_is_compared(models, capsys):
    assert main(["diff", f"{models}:matvec", f"{models}:matvec"]) == 0
    assert "EQUIVALENT" in capsys.readouterr().out


def test_an_infinite_bound_is_not_close_to_a_finite_one(models, capsys):
    assert main(["diff", f"{models}:clamp_inf", f"{models}:clamp_6"]) == 1
    out = capsys.readouterr().out
    assert "[attr-mismatch] clip max is inf in lhs" in out and "but 6 in rhs" in out
    assert main(["diff", f"{models}:clamp_inf", f"{models}:clamp_inf"]) == 0


def test_nan_both_sides_make_alike_is_a_note_not_a_finding(models, capsys):
    # sqrt of negative values: NaN forward and NaN gradients, the same on both sides
    assert main(["diff", f"{models}:sqrt", f"{models}:sqrt"]) == 0
    out = capsys.readouterr().out
    assert "nan-introduced" not in out
    assert "note: sqrt at <model> makes NaN from finite inputs on both sides alike" in out


def test_seeded_inputs_keep_the_domain_of_the_example_inputs(models, capsys):
    # the example feeds sqrt non-negative values and log(1 - p) values in [0, 1): every seed
    # drawn like them does too, so no NaN appears that the model's own inputs never make
    assert main(["diff", f"{models}:magnitude", f"{models}:magnitude", "--seed", "0-19"]) == 0
    out = capsys.readouterr().out
    assert "NaN" not in out and "EQUIVALENT" in out


def test_a_model_that_returns_nothing_is_refused_in_one_sentence(models, capsys):
    assert main(["show", f"{models}:nothing"]) == 2
    assert "returns no tensor" in capsys.readouterr().err


def test_a_directory_named_like_a_python_file_is_refused(tmp_path, capsys):
    (tmp_path / "model.py").mkdir()
    for reference in (f"{tmp_path}/model.py", f"{tmp_path}/model.py:make"):
        assert main(["show", reference]) == 2
        assert "is not a Python file" in capsys.readouterr().err


def test_an_infinite_attribute_is_json(models, capsys):
    import json

    assert main(["diff", f"{models}:clamp_inf", f"{models}:clamp_6", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (finding,) = report["findings"]
    assert (finding["attr"], finding["lhs"]["value"], finding["rhs"]["value"]) == ("max", "inf", 6.0)
    assert main(["show", f"{models}:clamp_inf", "--format", "json"]) == 0
    assert "inf" in json.dumps(json.loads(capsys.readouterr().out))
