"""Planted PyTorch kernel faults: context managers that swap a wrong CPU kernel into ATen.

Each context registers, with ``torch.library``, a CPU kernel for one ATen operator that
calls the original kernel and then corrupts its result in a narrow, documented case; on exit
the registration is destroyed and the original kernel is back. They stand in for a framework
bug a numeric comparison must find and localize:

* ``wrong_softmax``: ``aten::_softmax`` (what ``F.softmax``, ``torch.softmax`` and
  ``Tensor.softmax`` reach on CPU in eager mode) leaves the last ``n % 4`` entries along the
  softmax axis unnormalized (``exp(x - max)`` instead of ``exp(x - max) / sum``) when the
  axis is longer than 1024 and its length ``n`` is not a multiple of 4, like a vectorized
  kernel whose scalar tail loop forgets the division. Correct otherwise.
* ``wrong_gelu_backward``: ``aten::gelu_backward`` returns the gradient scaled by
  ``GELU_BACKWARD_SCALE`` (a relative error of 2e-3); the forward ``gelu`` is untouched.
* ``wrong_weight_gradient``: ``aten::mm`` returns its product scaled by
  ``GELU_BACKWARD_SCALE`` when the product is ``WEIGHT_GRADIENT_SHAPE`` (16x64: the
  gradient of ``GeluMLP``'s ``fc2`` weight, ``grad_out.T @ input``, which eager autograd
  makes with ``mm``); the forward (``addmm``) and every other product are untouched.

Only eager CPU kernels are replaced: compiled code (torch.compile) and other devices run
their own kernels.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["wrong_softmax", "wrong_gelu_backward", "wrong_weight_gradient", "SOFTMAX_OP",
           "GELU_BACKWARD_OP", "MM_OP", "WEIGHT_GRADIENT_SHAPE",
           "SOFTMAX_MIN_LENGTH", "SOFTMAX_VECTOR", "GELU_BACKWARD_SCALE"]

SOFTMAX_OP = "aten::_softmax"
GELU_BACKWARD_OP = "aten::gelu_backward"
SOFTMAX_MIN_LENGTH = 1024  # the fault needs an axis longer than this ...
SOFTMAX_VECTOR = 4  # ... whose length is not a multiple of this
GELU_BACKWARD_SCALE = 1.002
MM_OP = "aten::mm"
WEIGHT_GRADIENT_SHAPE = (16, 64)

# torch warns (once per process) that a kernel replaces a previously registered one
_OVERRIDE_WARNING = r"(?s).*Overriding a previously registered kernel"


@contextlib.contextmanager
def _cpu_kernel(op: str, make_kernel: Callable[[Any], Callable[..., Any]]) -> Iterator[None]:
    """Register ``make_kernel(original)`` as the CPU kernel of ATen ``op`` for the block.

    The kernel is registered with its dispatch key set as first argument, which it passes
    to ``original.call_boxed`` to run the kernel it replaced (calling the operator itself
    would dispatch back to the replacement).
    """
    original = torch.library.get_kernel(op, "CPU")
    with torch.library._scoped_library("aten", "IMPL") as lib:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_OVERRIDE_WARNING)
            lib.impl(op.split("::")[1], make_kernel(original), "CPU", with_keyset=True)
        yield


def _softmax_kernel(original: Any) -> Callable[..., torch.Tensor]:
    def kernel(keyset: Any, x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
        out = original.call_boxed(keyset, x, dim, half_to_float)
        n = x.shape[dim] if x.dim() else 1
        tail = n % SOFTMAX_VECTOR
        if n <= SOFTMAX_MIN_LENGTH or tail == 0:
            return out
        shifted = x.narrow(dim, n - tail, tail) - x.amax(dim, keepdim=True)
        out.narrow(dim, n - tail, tail).copy_(shifted.exp())  # the missing "/ sum"
        return out

    return kernel


def _gelu_backward_kernel(original: Any) -> Callable[..., torch.Tensor]:
    def kernel(keyset: Any, grad: torch.Tensor, x: torch.Tensor,
               approximate: str = "none") -> torch.Tensor:
        out = original.call_boxed(keyset, grad, x, approximate=approximate)
        return out * GELU_BACKWARD_SCALE

    return kernel


@contextlib.contextmanager
def wrong_softmax() -> Iterator[None]:
    """CPU softmax leaves the trailing ``n % 4`` entries of each slice unnormalized when the
    softmax axis has ``n > 1024`` entries and ``n % 4 != 0``; correct otherwise."""
    with _cpu_kernel(SOFTMAX_OP, _softmax_kernel):
        yield


@contextlib.contextmanager
def wrong_gelu_backward() -> Iterator[None]:
    """CPU ``gelu_backward`` returns the gradient times ``GELU_BACKWARD_SCALE`` (1.002)."""
    with _cpu_kernel(GELU_BACKWARD_OP, _gelu_backward_kernel):
        yield


def _inf_gelu_backward_kernel(original: Any) -> Callable[..., torch.Tensor]:
    def kernel(keyset: Any, grad: torch.Tensor, x: torch.Tensor,
               approximate: str = "none") -> torch.Tensor:
        out = original.call_boxed(keyset, grad, x, approximate=approximate).clone()
        out.view(-1)[::5] = float("inf")
        return out

    return kernel


@contextlib.contextmanager
def inf_gelu_backward() -> Iterator[None]:
    """CPU ``gelu_backward`` writes Inf into every fifth element of its gradient."""
    with _cpu_kernel(GELU_BACKWARD_OP, _inf_gelu_backward_kernel):
        yield


def _weight_gradient_kernel(original: Any) -> Callable[..., torch.Tensor]:
    def kernel(keyset: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = original.call_boxed(keyset, a, b)
        return out * GELU_BACKWARD_SCALE if tuple(out.shape) == WEIGHT_GRADIENT_SHAPE else out

    return kernel


@contextlib.contextmanager
def wrong_weight_gradient() -> Iterator[None]:
    """CPU ``mm`` returns its product times 1.002 when it is 16x64 (``GeluMLP.fc2``'s weight
    gradient); correct otherwise."""
    with _cpu_kernel(MM_OP, _weight_gradient_kernel):
        yield
