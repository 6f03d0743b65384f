"""Comparison arithmetic on a GPU: any framework's tensor seen as a PyTorch tensor through
DLPack (no copy), statistics computed on the device, only numbers sent to the host."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from specgraph.ir import same_elements
from specgraph.numeric.arrays import DeviceStore, HostArrays
from specgraph.numeric.runner import Runner
from specgraph.numeric.stats import (Stats, Tolerance, keep_square_sum, known_square_sum,
                                     underflow_floor)

__all__ = ["DeviceArrays", "as_torch"]


def as_torch(x: Any) -> torch.Tensor:
    """``x`` (a PyTorch, JAX or TensorFlow tensor, or a NumPy array) as a torch tensor on its
    own device, sharing memory where DLPack allows."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x).reshape(x.shape))  # 0-d stays 0-d
    if hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x)
    import tensorflow as tf  # a TF eager tensor: DLPack through TF's own capsule

    return torch.from_dlpack(tf.experimental.dlpack.to_dlpack(x))


class DeviceArrays:
    """Measures on the device of whichever value is there; both sides meet there. Two host
    arrays (weights, a sum made on the host) are measured on the host, as ``HostArrays``
    does: nothing crosses for them, and a device value never comes back to meet one."""

    _host = HostArrays()

    def keep(self, runner: Runner, tensor: Any) -> Any:
        return tensor

    def host(self, kept: Any) -> np.ndarray:
        if isinstance(kept, np.ndarray):
            return kept
        t = as_torch(kept).detach()
        return (t.float() if t.is_floating_point() else t).cpu().numpy()

    def _pair(self, lhs: Any, rhs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = as_torch(lhs).detach(), as_torch(rhs).detach()
        if a.device != b.device:  # a host value goes to the device, never the reverse
            if a.device.type == "cpu":
                a = a.to(b.device)
            else:
                b = b.to(a.device)
        return a, b

    def measure(self, lhs: Any, rhs: Any, tol: Tolerance, floor: float = 0.0) -> Stats:
        if (isinstance(lhs, np.ndarray) and isinstance(rhs, np.ndarray)) or tol.drowned:
            # (an additive mask, small: its drowned keys are set aside on the host)
            return self._host.measure(self.host(lhs), self.host(rhs), tol, floor)
        a, b = self._pair(lhs, rhs)
        if tuple(a.shape) != tuple(b.shape) and same_elements(a.shape, b.shape):
            b = b.reshape(a.shape)  # a scalar against [1]: the same elements in order
        if tuple(a.shape) != tuple(b.shape):
            return Stats(math.inf, math.inf, 1.0, 0.0, 0.0, shape_differs=True)
        if not a.numel():
            return Stats(0.0, 0.0, 0.0, 1.0, max(0.0, floor))
        if not a.is_floating_point() and not b.is_floating_point():
            wrong, top = torch.stack([(a != b).double().mean(),
                                      (a.double() - b.double()).abs().max()]).tolist()
            return Stats(top, 0.0, wrong, 1.0 if wrong == 0 else 0.0, 0.0)
        least = 0.0 if tol.absolute else underflow_floor(a.dtype, b.dtype)
        a, b = a.double(), b.double()
        found = self._measure_finite(a, b, tol, floor, least)
        if found is None:  # NaN or Inf on a side (or a sum past float64's largest)
            return self._measure_floats(a, b, tol, floor, least)
        stats, saa, sbb = found
        # the finite checks and floors that follow this measure read these, not the values
        keep_square_sum(lhs, saa, a.numel())
        keep_square_sum(rhs, sbb, a.numel())
        return stats

    @staticmethod
    def _measure_finite(a: torch.Tensor, b: torch.Tensor, tol: Tolerance, floor: float,
                        least: float = 0.0) -> tuple[Stats, float, float] | None:
        """``measure`` of two float64 tensors if every element of both is finite (Σa² and
        Σb² are finite exactly then, short of overflow), with Σa² and Σb²; else None. Half
        the kernels of ``_measure_floats``, whose masks only non-finite values need: a
        device measure is launches more than arithmetic."""
        x, y = a.reshape(-1), b.reshape(-1)
        sums = torch.stack([torch.dot(x, x), torch.dot(y, y), torch.dot(x, y)])
        diff = (x - y).abs_()
        bound = torch.maximum(x.abs(), y.abs()).mul_(tol.rtol)
        scale = torch.sqrt(sums[0] / x.numel())
        bound.add_(tol.atol if tol.absolute
                   else (scale.clamp_min(floor) * tol.atol).clamp_min(least))
        saa, sbb, sab, top, wrong = torch.cat([
            sums, diff.max().reshape(1),
            torch.count_nonzero(diff > bound).double().reshape(1)]).tolist()
        if not (math.isfinite(saa) and math.isfinite(sbb)):
            return None
        scale_ = math.sqrt(saa / x.numel())
        relative = tol.atol if tol.absolute else tol.atol * max(scale_, floor)
        return Stats.from_sums(saa, sbb, sab, top, wrong / x.numel(), scale_, floor,
                               underflow=wrong == 0 and top > relative and least > relative
                               ), saa, sbb

    @staticmethod
    def _measure_floats(a: torch.Tensor, b: torch.Tensor, tol: Tolerance,
                        floor: float, least: float = 0.0) -> Stats:
        """``measure`` in float64 on the device, NaN and Inf included: every statistic is
        made there and they cross to the host together, in one transfer (one wait for the
        device)."""
        fa, fb = torch.isfinite(a), torch.isfinite(b)
        both = fa & fb
        az, bz = torch.where(both, a, 0.0), torch.where(both, b, 0.0)
        saa, sbb, sab = (az * az).sum(), (bz * bz).sum(), (az * bz).sum()
        count = both.sum()
        scale = torch.sqrt(saa / count.clamp_min(1))
        atol = tol.atol if tol.absolute else (tol.atol * scale.clamp_min(floor)).clamp_min(least)
        diff = (az - bz).abs()
        bound = atol + tol.rtol * torch.maximum(az.abs(), bz.abs())
        same = ~fa & ~fb & ((a == b) | (torch.isnan(a) & torch.isnan(b)))
        bad = (both & (diff > bound)) | (~both & ~same)
        saa_, sbb_, sab_, top, wrong, scale_, fa_all, fb_all = torch.stack([
            saa, sbb, sab, diff.max(), bad.double().mean(), scale, fa.all().double(),
            fb.all().double()]).tolist()
        return Stats.from_sums(saa_, sbb_, sab_, top, wrong, scale_, floor, fa_all == 1.0,
                               fb_all == 1.0)

    @staticmethod
    def _known_finite(kept: Any) -> bool:
        """Whether a measure of ``kept`` just found Σx² finite (then every element is)."""
        total = known_square_sum(kept)
        return total is not None and math.isfinite(total)

    def finite(self, kept: Any) -> bool:
        if isinstance(kept, np.ndarray):
            return self._host.finite(kept)
        if self._known_finite(kept):
            return True
        t = as_torch(kept)
        return not t.is_floating_point() or bool(torch.isfinite(t).all().item())

    def nan_free(self, kept: Any) -> bool:
        if isinstance(kept, np.ndarray):
            return self._host.nan_free(kept)
        if self._known_finite(kept):
            return True
        t = as_torch(kept)
        return not t.is_floating_point() or not bool(torch.isnan(t).any().item())

    def rms(self, kept: Any) -> float:
        if isinstance(kept, np.ndarray):
            return self._host.rms(kept)
        t = as_torch(kept).detach()
        if not t.numel():
            return 0.0
        total = known_square_sum(kept)
        if total is not None and math.isfinite(total):
            return math.sqrt(total / t.numel())
        return float(t.double().square().mean().sqrt().item())

    def equal(self, a: Any, b: Any) -> bool:
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return self._host.equal(a, b)
        x, y = self._pair(a, b)
        return bool(torch.equal(x, y) or (x.is_floating_point() and torch.equal(
            torch.nan_to_num(x, nan=0.0), torch.nan_to_num(y, nan=0.0))
            and torch.equal(torch.isnan(x), torch.isnan(y))))

    def store(self, budget: int) -> DeviceStore:
        return DeviceStore()
