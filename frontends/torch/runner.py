"""The PyTorch runner: canonical nodes executed one at a time on PyTorch's own kernels.

The op table is ``kernels.KERNELS`` (each canonical op written with the public calls a model
makes); this module holds the plumbing around it: devices and storage dtypes, putting and
fetching tensors, gradients through ``torch.autograd``, the TF32 switches, and compiled mode
(each op through ``torch.compile``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from specgraph.errors import first_line
from specgraph.frontends.torch.kernels import KERNELS
from specgraph.ir import Node
from specgraph.numeric.runner import Context, Pullback, Runner, RunnerError
from specgraph.ops.dtypes import FLOAT_DTYPES

__all__ = ["TorchRunner"]

STORAGE = ("float32", "bfloat16", "float16", "float64")
DTYPES = (*STORAGE, "int64", "int32", "int16", "int8", "uint8", "bool")


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RunnerError("the torch runner was asked for cuda, but this PyTorch sees no CUDA "
                          "device; pass --device cpu or install a CUDA build of PyTorch")
    if device not in ("cpu", "cuda"):
        raise RunnerError(f"the torch runner runs on cpu or cuda, not {device!r}")
    return device


_KERNEL_ERRORS = (RuntimeError, ValueError, TypeError, IndexError)


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _compile(fn: Any, attrs: dict[str, Any], op: str) -> Any:
    """``fn`` with ``attrs`` bound, through ``torch.compile``, under a code object of its own.

    Dynamo keeps compiled graphs, and counts recompilations against its limit, per code
    object; past the limit it runs the function eagerly without a word. A fresh code object
    per op, attributes and input types compiles once (once more for the gradient mode), so
    no graph is ever left uncompiled however many layers a model has.
    """

    def bound(*inputs: Any) -> Any:
        return fn(*inputs, **attrs)

    bound.__code__ = bound.__code__.replace(co_name=op, co_qualname=f"torch_runner.{op}")
    return torch.compile(bound, dynamic=False)


_PROGRAMS: dict[Any, Any] = {}  # compiled per op, attributes (and shapes)


class TorchRunner(Runner):
    """Canonical nodes on PyTorch kernels, eager or each op through ``torch.compile``.

    In compiled mode each op, with its attributes and input shapes and dtypes, is compiled
    once (``dynamic=False``) and cached; the forward runs under ``torch.no_grad``, ``vjp``
    under ``torch.enable_grad``.

    TF32 is process-wide state in PyTorch: a ``tf32`` context turns it on for matmuls and
    cuDNN convolutions, any other context turns it off; the runner sets it when created and
    again before every forward and backward, so two runners of one process (one per side)
    each run under their own setting.
    """

    framework = "torch"
    differentiable = True
    ops = KERNELS

    def __init__(self, context: Context) -> None:
        if context.storage not in STORAGE:
            raise RunnerError(f"the torch runner stores floats as one of {', '.join(STORAGE)}, "
                              f"not {context.storage!r}")
        device = _resolve_device(context.device)
        super().__init__(replace(context, device=device))
        self.device = torch.device(device)
        self.storage = getattr(torch, context.storage)
        self._compiled = _PROGRAMS  # shared by every runner of the process
        self._set_precision()

    def _set_precision(self) -> None:
        # the legacy switches keep the legacy and the fp32_precision views consistent
        tf32 = self.context.dtype == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32

    # --- tensors -------------------------------------------------------------------------
    def _dtype(self, dtype: str) -> torch.dtype:
        if dtype in FLOAT_DTYPES:
            return self.storage
        if dtype not in DTYPES:
            raise RunnerError(f"the torch runner has no tensors of dtype {dtype!r}")
        return getattr(torch, dtype)

    def put(self, array: np.ndarray, dtype: str) -> torch.Tensor:
        a = np.asarray(array)
        if a.dtype.kind not in "biuf":  # bfloat16 from ml_dtypes and the like
            a = a.astype(np.float32)
        if not a.flags.writeable or not a.flags.c_contiguous:
            a = np.array(a)  # torch shares memory only with writable, contiguous arrays
        return torch.from_numpy(a).to(self.device, self._dtype(dtype))

    def fetch(self, tensor: Any) -> np.ndarray:
        if not isinstance(tensor, torch.Tensor):
            return np.asarray(tensor)
        t = tensor.detach()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.cpu().numpy()

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # --- ops -----------------------------------------------------------------------------
    def _callable(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, dict[str, Any]]:
        """The function to call for ``node`` and the keyword attributes to call it with."""
        fn = self._fn(node)
        attrs = dict(node.attrs)
        if attrs.get("dtype") in FLOAT_DTYPES:  # floating targets (cast, full, arange): storage
            attrs["dtype"] = self.context.storage
        if self.context.mode != "compiled":
            return fn, attrs
        key = (node.op, tuple(sorted((k, _freeze(v)) for k, v in attrs.items())),
               tuple((tuple(x.shape), x.dtype) for x in inputs))
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = _compile(fn, attrs, node.op)
        return compiled, {}

    def _call(self, node: Node, inputs: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        fn, attrs = self._callable(node, inputs)
        try:
            out = fn(*inputs, **attrs)
        except _KERNEL_ERRORS as err:
            raise self._failure(node, "", err) from err
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        # outputs in the graph's dtypes: floats in the storage dtype, integers as declared
        declared = [self._dtype(v.dtype) for v in node.outputs]
        return tuple(o.to(self.device, declared[i]) if i < len(declared) else o
                     for i, o in enumerate(outs))

    def _failure(self, node: Node, what: str, err: Exception) -> RunnerError:
        return RunnerError(f"PyTorch failed on the {what}{node.describe()} "
                           f"({self.context.describe()}): {first_line(err)}")

    def run(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, ...]:
        self._set_precision()
        with torch.no_grad():
            return self._call(node, inputs)

    def vjp(self, node: Node, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Pullback]:
        """Outputs of ``node`` and a pullback; the pullback may be called more than once."""
        self._set_precision()
        leaves = [x.detach().requires_grad_() if _differentiable(x) else x for x in inputs]
        with torch.enable_grad():
            outs = self._call(node, leaves)

        def pullback(cts: Sequence[Any]) -> tuple[Any, ...]:
            pairs = [(o, ct.to(o.dtype)) for o, ct in zip(outs, cts)
                     if ct is not None and o.is_floating_point() and o.requires_grad]
            wrt = [i for i, x in enumerate(leaves) if _differentiable(x)]
            grads: list[Any] = [None] * len(leaves)
            if not pairs or not wrt:
                return tuple(grads)
            self._set_precision()
            try:
                found = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in wrt],
                                            [ct for _, ct in pairs], retain_graph=True,
                                            allow_unused=True)
            except _KERNEL_ERRORS as err:
                raise self._failure(node, "backward of ", err) from err
            for i, g in zip(wrt, found):
                grads[i] = g
            return tuple(grads)

        return tuple(o.detach() for o in outs), pullback


def _differentiable(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()
