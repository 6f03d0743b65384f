"""The HTML report's page data (``specgraph.page.build_page``) on models that group, name and
place their layers as real ones do: equations paired across sides, folds, source excerpts."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from specgraph.check import compare  # noqa: E402
from specgraph.page import build_page  # noqa: E402
from specgraph.page_sources import excerpts, resolve  # noqa: E402

# lhs puts the activation in a module of its own beside the linear (merged into one line),
# rhs applies it in the parent (a line of its own): the same math, grouped differently
GROUPING = '''
import torch
from torch import nn


class Act(nn.Module):
    def forward(self, x):
        return nn.functional.gelu(x)


class MlpInline(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.act = Act()
        self.proj = nn.Linear(16, 8)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class MlpNamed(MlpInline):
    def forward(self, x):
        return self.proj(nn.functional.gelu(self.fc(x)))


class Net(nn.Module):
    def __init__(self, mlp, eps):
        super().__init__()
        self.mlp = mlp
        self.norm = nn.LayerNorm(8, eps=eps)

    def forward(self, x):
        return self.norm(x + self.mlp(x))


def inline():
    torch.manual_seed(0)
    return Net(MlpInline(), 1e-5), (torch.randn(2, 8),)


def named():
    torch.manual_seed(0)
    return Net(MlpNamed(), 1e-5), (torch.randn(2, 8),)


def named_eps():
    torch.manual_seed(0)
    return Net(MlpNamed(), 1e-3), (torch.randn(2, 8),)
'''


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


def _rows(page):
    return [(line["lhs_text"], line["rhs_text"], line["differs"])
            for sec in page.equations for line in sec["lines"]]


def test_equations_grouped_differently_pair_line_by_line(tmp_path):
    ref = _write(tmp_path, "grouping", GROUPING)
    page = build_page(compare(f"{ref}:inline", f"{ref}:named", mode="structure"))
    rows = _rows(page)
    assert rows and all(a and b for a, b, _ in rows), rows  # every line has its partner
    assert not any(differs for _, _, differs in rows), rows
    gelu = [(a, b) for a, b, _ in rows if "gelu" in a]
    assert len(gelu) == 1 and "W_" not in gelu[0][0]  # the linear named on both sides
    assert not any(sec.get("differs") for sec in page.equations)


def test_equations_differ_only_where_the_math_does(tmp_path):
    ref = _write(tmp_path, "grouping", GROUPING)
    page = build_page(compare(f"{ref}:inline", f"{ref}:named_eps", mode="structure"))
    differing = [(a, b) for a, b, differs in _rows(page) if differs]
    assert len(differing) == 1 and "layer_norm" in differing[0][0]
    marked = [line for sec in page.equations for line in sec["lines"] if line["differs"]]
    assert 'class="d"' in marked[0]["lhs"] and "0.001" in marked[0]["rhs_text"]


FLAT = '''
import torch
from torch import nn


class Flat(nn.Module):
    """Keras-style flat names: conv_dw_k and conv_pw_k alternate, one op each; two
    one-op norms ln_1 and ln_2 with a block between them; then three whole blocks."""

    def __init__(self):
        super().__init__()
        for k in range(1, 5):
            self.add_module(f"conv_dw_{k}", nn.Conv2d(4, 4, 3, padding=1, groups=4))
            self.add_module(f"conv_pw_{k}", nn.Conv2d(4, 4, 1))
        self.ln_1 = nn.LayerNorm(4)
        self.mid = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.ln_2 = nn.LayerNorm(4)
        self.h = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(3))

    def forward(self, x):
        for k in range(1, 5):
            x = getattr(self, f"conv_pw_{k}")(getattr(self, f"conv_dw_{k}")(x))
        x = self.ln_2(self.mid(self.ln_1(x.mean(dim=(2, 3)))))
        for block in self.h:
            x = block(x)
        return x


def make():
    torch.manual_seed(0)
    return Flat(), (torch.randn(1, 4, 6, 6),)
'''


def test_folds_only_adjacent_whole_blocks_of_several_ops(tmp_path):
    ref = _write(tmp_path, "flat", FLAT) + ":make"
    page = build_page(compare(ref, ref, mode="structure"))
    labels = [f["label"] for f in page.sides[0]["folds"]]
    assert labels == ["h.1–2: identical to h.0"]


def test_source_excerpts_of_an_installed_package(tmp_path):
    """A location shown from its package root reads the module's real file."""
    import json.decoder

    line = 5
    out = excerpts([f"json/decoder.py:{line}", "json/../../../../etc/passwd.py:1",
                    "/etc/hostname:1"])
    assert list(out) == ["json/decoder.py:5"]
    first, lines = out["json/decoder.py:5"]
    real = Path(json.decoder.__file__).read_text().splitlines()
    assert lines == real[first - 1:first - 1 + len(lines)] and first <= line
    assert resolve("json/decoder.py") == Path(json.decoder.__file__)
    # a link under a sys.path entry that leads out of it is not followed
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("KEY = 1\n")
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "pkg").symlink_to(outside)
    sys.path.append(str(entry))
    try:
        assert resolve("pkg/secret.py") is None
    finally:
        sys.path.remove(str(entry))
