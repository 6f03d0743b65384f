"""An additive mask on its way into a softmax holds a different number at each masked key
in each port (HF T5 in PyTorch adds its padding mask to the relative position bias with
``finfo.min``, in TensorFlow with -1e9): those layers agree wherever the softmax can tell,
so the numbers compare what is left once the keys both sides drown are set aside, and a
key masked on one side only, or a fill that does not drown, still parts them."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from specgraph.cli import main  # noqa: E402
from specgraph.ir import GraphBuilder  # noqa: E402
from specgraph.passes.drowned import drowning  # noqa: E402
from specgraph.numeric.stats import Tolerance, measure  # noqa: E402

MODELS = '''
import numpy as np
import torch

B, H, T, D = 2, 2, 6, 4
RNG = np.random.default_rng(0)
X = RNG.standard_normal((B, T, H * D)).astype(np.float32)
MASK = np.ones((B, T), np.int64)
MASK[1, 4:] = 0


class Attention(torch.nn.Module):
    """T5's way: a learned bias per head and key pair, the padding mask added to it."""

    def __init__(self, fill, masked=True):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(H * D, 3 * H * D)
        self.bias = torch.nn.Parameter(0.1 * torch.randn(1, H, T, T))
        self.fill, self.masked = fill, masked

    def forward(self, x, attention_mask):
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        bias = self.bias
        if self.masked:
            extended = (1.0 - attention_mask[:, None, None, :].float()) * self.fill
            bias = bias + extended
        p = torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1)
        return (p @ v).transpose(1, 2).reshape(B, T, H * D)


def make(fill, masked=True):
    return Attention(fill, masked), (torch.from_numpy(X), torch.from_numpy(MASK))


def finfo():
    return make(float(torch.finfo(torch.float32).min))


def tf_style():
    return make(-1e9)


def minus_one():
    return make(-1.0)


def unmasked():
    return make(-1e9, masked=False)
'''


def _diff(tmp_path, capsys, lhs: str, rhs: str) -> tuple[int, dict]:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    capsys.readouterr()
    code = main(["diff", f"{path}:{lhs}", f"{path}:{rhs}", "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_two_fills_that_drown_agree_layer_by_layer(tmp_path, capsys):
    code, report = _diff(tmp_path, capsys, "finfo", "tf_style")
    assert code == 0, [f["message"] for f in report["findings"]]
    layers = report["numeric"]["layers"]
    # the bias plus the mask is compared, and agrees once the drowned keys are set aside
    assert any(layer["lhs"].startswith("add") and layer["forward"] is not None
               for layer in layers)


@pytest.mark.parametrize("rhs", ["minus_one", "unmasked"])
def test_a_fill_that_does_not_drown_or_no_mask_still_parts_them(tmp_path, capsys, rhs):
    code, report = _diff(tmp_path, capsys, "finfo", rhs)
    assert code == 1
    assert "numeric-divergence" in {f["code"] for f in report["findings"]} or any(
        f["code"] != "numeric-divergence" for f in report["findings"])


def test_drowning_finds_what_reaches_only_a_softmax_additively():
    b = GraphBuilder()
    s = b.input("s", (2, 4), "float32")
    m = b.input("m", (2, 4), "float32")
    w = b.input("w", (2, 4), "float32")
    masked = b.add("mul", [m, b.constant(np.array(-1e9, np.float32))], {}, shape=(2, 4),
                   dtype="float32")
    biased = b.add("add", [w, masked], {}, shape=(2, 4), dtype="float32")
    scores = b.add("sub", [s, biased], {}, shape=(2, 4), dtype="float32")  # biased negated
    added = b.add("add", [s, biased], {}, shape=(2, 4), dtype="float32")
    p = b.add("softmax", [added], {"axis": 1}, shape=(2, 4), dtype="float32")
    b.output("p", p)
    b.output("other", b.add("softmax", [scores], {"axis": 1}, shape=(2, 4), dtype="float32"))
    g = b.build()
    found = drowning(g)
    assert added in found and scores in found  # scores minus a mask: still the scores
    assert biased not in found and masked not in found  # biased is also subtracted
    assert p not in found


def test_a_drowned_measure_sets_aside_keys_both_sides_drown_and_no_others():
    a = np.array([[0.5, -3.4e38, 1.0], [0.2, 0.3, -3.4e38]], np.float32)
    b = np.array([[0.5, -1e9, 1.0], [0.2, 0.3, -1e9]], np.float32)
    plain = Tolerance(2e-5, 2e-5)
    assert measure(a, b, plain).diverges
    assert not measure(a, b, Tolerance(2e-5, 2e-5, drowned=True)).diverges
    one_side = b.copy()
    one_side[0, 0] = -1e9  # a key masked on rhs only
    assert measure(a, one_side, Tolerance(2e-5, 2e-5, drowned=True)).diverges
    off = b.copy()
    off[1, 0] = 0.25  # a kept key that differs
    st = measure(a, off, Tolerance(2e-5, 2e-5, drowned=True))
    assert st.diverges and st.max_abs == pytest.approx(0.05)
