"""Factories of the BERT-base-sized pairs ``bench.report`` draws: the PyTorch encoder of
``bench._models`` against its Flax linen port, 12 or 48 layers, random weights (specgraph
moves the PyTorch weights into the Flax model before comparing numbers)."""

from __future__ import annotations

from typing import Any

import numpy as np


def _torch(layers: int) -> tuple[Any, tuple[Any, ...]]:
    import torch

    from _models import Bert, inputs  # this folder is on the path of a factory file

    torch.manual_seed(0)
    return Bert(layers).eval(), (torch.from_numpy(inputs("bert")),)


def _flax(layers: int) -> tuple[Any, Any, tuple[Any, ...]]:
    import jax

    from _models import LinenBert, inputs

    ids = inputs("bert").astype(np.int32)
    module = LinenBert(layers=layers)
    return module, module.init(jax.random.key(0), ids), (ids,)


def torch_bert12():
    return _torch(12)


def flax_bert12():
    return _flax(12)


def torch_bert48():
    return _torch(48)


def flax_bert48():
    return _flax(48)
