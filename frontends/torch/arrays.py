"""Comparison arithmetic on a GPU: any framework's tensor seen as a PyTorch tensor through
DLPack (no copy), statistics computed on the device, only numbers sent to the host."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from specgraph.numeric.arrays import DeviceStore
from specgraph.numeric.runner import Runner
from specgraph.numeric.stats import Stats, Tolerance

__all__ = ["DeviceArrays", "as_torch"]


def as_torch(x: Any) -> torch.Tensor:
    """``x`` (a PyTorch, JAX or TensorFlow tensor, or a NumPy array) as a torch tensor on its
    own device, sharing memory where DLPack allows."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    if hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x)
    import tensorflow as tf  # a TF eager tensor: DLPack through TF's own capsule

    return torch.from_dlpack(tf.experimental.dlpack.to_dlpack(x))


class DeviceArrays:
    """Measures on the device of the lhs tensor; both sides meet there."""

    def keep(self, runner: Runner, tensor: Any) -> Any:
        return tensor

    def host(self, kept: Any) -> np.ndarray:
        t = as_torch(kept).detach()
        return (t.float() if t.is_floating_point() else t).cpu().numpy()

    def _pair(self, lhs: Any, rhs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        a = as_torch(lhs).detach()
        b = as_torch(rhs).detach().to(a.device)
        return a, b

    def measure(self, lhs: Any, rhs: Any, tol: Tolerance, floor: float = 0.0) -> Stats:
        a, b = self._pair(lhs, rhs)
        if tuple(a.shape) != tuple(b.shape):
            return Stats(math.inf, math.inf, 1.0, 0.0, 0.0, shape_differs=True)
        if not a.is_floating_point() and not b.is_floating_point():
            wrong = (a != b).double().mean().item() if a.numel() else 0.0
            return Stats(float((a.double() - b.double()).abs().max().item()) if a.numel()
                         else 0.0, 0.0, wrong, 1.0 if wrong == 0 else 0.0, 0.0)
        a, b = a.double(), b.double()
        fa, fb = torch.isfinite(a), torch.isfinite(b)
        both = fa & fb
        same = ~fa & ~fb & ((a == b) | (torch.isnan(a) & torch.isnan(b)))
        az, bz = torch.where(both, a, 0.0), torch.where(both, b, 0.0)
        count = max(int(both.sum().item()), 1)
        scale = math.sqrt(float((az * az).sum().item()) / count)
        diff = (az - bz).abs()
        atol = tol.atol if tol.absolute else tol.atol * max(scale, floor)
        bound = atol + tol.rtol * torch.maximum(az.abs(), bz.abs())
        bad = (both & (diff > bound)) | (~both & ~same)
        na, nb = float(az.norm().item()), float(bz.norm().item())
        dot = float((az * bz).sum().item())
        cosine = dot / (na * nb) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
        max_abs = float(diff.max().item()) if diff.numel() else 0.0
        scale = max(scale, floor)
        return Stats(max_abs, max_abs / scale if scale > 0 else (0.0 if max_abs == 0
                                                                 else math.inf),
                     float(bad.double().mean().item()) if a.numel() else 0.0, cosine, scale,
                     bool(fa.all().item()), bool(fb.all().item()))

    def finite(self, kept: Any) -> bool:
        t = as_torch(kept)
        return not t.is_floating_point() or bool(torch.isfinite(t).all().item())

    def nan_free(self, kept: Any) -> bool:
        t = as_torch(kept)
        return not t.is_floating_point() or not bool(torch.isnan(t).any().item())

    def rms(self, kept: Any) -> float:
        t = as_torch(kept).detach().double()
        return float(t.square().mean().sqrt().item()) if t.numel() else 0.0

    def equal(self, a: Any, b: Any) -> bool:
        x, y = self._pair(a, b)
        return bool(torch.equal(x, y) or (x.is_floating_point() and torch.equal(
            torch.nan_to_num(x, nan=0.0), torch.nan_to_num(y, nan=0.0))
            and torch.equal(torch.isnan(x), torch.isnan(y))))

    def store(self, budget: int) -> DeviceStore:
        return DeviceStore()
