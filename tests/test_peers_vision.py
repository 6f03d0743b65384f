"""The peer corpus's vision and audio architectures (HF's ResNet, RegNet, ConvNeXt, Swin and
Wav2Vec2 ported to PyTorch, TensorFlow and Flax), one ordered pair each through the CLI's
code path: each pair is the same function, reported equivalent, numbers included. The
whole corpus, every pair, is ``python -m bench.peers``."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tensorflow")

from bench.peers import run_pair  # noqa: E402

SLOW = pytest.mark.slow  # over 5 s here: Flax's compilation, TF's AutoGraph trace
PAIRS = [
    pytest.param("resnet", "tf", "torch", id="resnet-tf-torch"),
    pytest.param("convnext", "torch", "tf", id="convnext-torch-tf"),
    pytest.param("regnet", "tf", "flax", id="regnet-tf-flax", marks=SLOW),
    pytest.param("swin", "tf", "torch", id="swin-tf-torch", marks=SLOW),
    pytest.param("wav2vec2", "flax", "torch", id="wav2vec2-flax-torch", marks=SLOW),
]


@pytest.mark.parametrize(("arch", "lhs", "rhs"), PAIRS)
def test_ports_of_one_architecture_are_equivalent(arch: str, lhs: str, rhs: str) -> None:
    outcome = run_pair(arch, lhs, rhs)
    assert outcome.kind == "right", outcome.detail
