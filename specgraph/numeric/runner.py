"""Runners: one per framework, each executing canonical nodes with that framework's kernels.

A numeric comparison replays each side's canonical graph node by node on the side's own
framework (PyTorch kernels for a PyTorch model, XLA for JAX, TensorFlow's for Keras,
onnxruntime for an ONNX file), so every aligned layer's output and gradient can be read as
it is produced, and one side's layer can be fed the other side's inputs. A runner knows
nothing about graphs: it puts arrays on its device, runs one op, and pulls gradients back
through one op. Each framework's runner lives in its frontend's package
(``specgraph.frontends.<framework>.runner``) with an op table: a dict from canonical op name
to a function ``fn(*inputs, **attrs)`` with the same signature and meaning as the op's NumPy
reference in ``specgraph.ops``. This module is the base they share; the front door
(``specgraph.check``) finds them in the frontends' registry and hands them down.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from specgraph.errors import SpecgraphError
from specgraph.ir import Node
from specgraph.ops import get_spec
from specgraph.ops.dtypes import FLOAT_DTYPES

__all__ = ["Context", "Runner", "ReferenceRunner", "RunnerError", "Pullback",
           "DEVICES", "MODES", "PRECISIONS"]

DEVICES = ("auto", "cpu", "cuda")
MODES = ("eager", "compiled")
PRECISIONS = ("float32", "tf32", "bfloat16", "float16")

# pullback(output cotangents, one per node output, None where nothing flows back)
#   -> input cotangents, one per node input (None for integer inputs or no gradient)
Pullback = Callable[[Sequence[Any]], tuple[Any, ...]]
OpFn = Callable[..., Any]


class RunnerError(SpecgraphError):
    """A runner cannot execute a node (an op it lacks, a device that is not there)."""


@dataclass(frozen=True)
class Context:
    """Where and how one side runs.

    Attributes:
        device: ``cpu``, ``cuda``, or ``auto``: the runner takes a GPU where its framework
            has one, else the CPU.
        mode: ``eager`` (op by op) or ``compiled`` (each op through the framework's compiler:
            torch.compile, jax.jit, tf.function with jit_compile).
        dtype: the floating precision: ``float32``; ``tf32`` (float32 storage, TensorFloat-32
            matmuls and convolutions on GPUs that have them); ``bfloat16``; ``float16``.
        repeat: how many times each op runs (the runs must agree bit for bit; a difference is
            nondeterminism).
    """

    device: str = "cpu"
    mode: str = "eager"
    dtype: str = "float32"
    repeat: int = 1

    @property
    def storage(self) -> str:
        """The floating dtype tensors are stored in."""
        return "float32" if self.dtype == "tf32" else self.dtype

    def describe(self) -> str:
        return f"{self.device},{self.mode},{self.dtype}"

    @classmethod
    def parse(cls, text: str, base: Context | None = None) -> Context:
        """``cpu,compiled`` / ``cuda,bfloat16`` / ``eager``: words in any order, over ``base``.

        Raises:
            RunnerError: a word is none of the devices, modes or precisions.
        """
        ctx = base or cls()
        for word in (w.strip() for w in text.split(",") if w.strip()):
            if word in DEVICES:
                ctx = replace(ctx, device=word)
            elif word in MODES:
                ctx = replace(ctx, mode=word)
            elif word in PRECISIONS:
                ctx = replace(ctx, dtype=word)
            else:
                raise RunnerError(
                    f"context {text!r}: {word!r} is no device ({', '.join(DEVICES)}), mode "
                    f"({', '.join(MODES)}) or precision ({', '.join(PRECISIONS)})")
        return ctx


class Runner(abc.ABC):
    """Executes canonical nodes with one framework; subclasses fill the op table and the
    tensor plumbing.

    Class attributes:
        framework: the framework's name, for messages (``torch``, ``jax``, ``tf``...).
        differentiable: whether ``vjp`` works (onnxruntime computes no gradients).
        ops: the op table, canonical op name -> ``fn(*inputs, **attrs)``.
    """

    framework: ClassVar[str] = ""
    differentiable: ClassVar[bool] = True
    ops: ClassVar[Mapping[str, OpFn]] = {}

    def __init__(self, context: Context) -> None:
        self.context = context

    # --- tensors -------------------------------------------------------------------------
    @abc.abstractmethod
    def put(self, array: np.ndarray, dtype: str) -> Any:
        """A host array as a tensor on this runner's device; ``dtype`` is the graph's dtype
        for it (floating dtypes become the context's storage dtype)."""

    @abc.abstractmethod
    def fetch(self, tensor: Any) -> np.ndarray:
        """A tensor back on the host (floating tensors as float32 or wider)."""

    @abc.abstractmethod
    def add(self, a: Any, b: Any) -> Any:
        """a + b (cotangents that reach a value from several readers are summed)."""

    def synchronize(self) -> None:
        """Wait for queued device work (for timing and memory figures)."""

    def device_kind(self) -> str:
        """``cuda`` when this runner's tensors live on a GPU, else ``cpu``."""
        where = str(getattr(self, "device", "cpu")).lower()
        return "cuda" if "cuda" in where or "gpu" in where else "cpu"

    # --- ops -----------------------------------------------------------------------------
    def supports(self, op: str) -> bool:
        return op in self.ops

    def _fn(self, node: Node) -> OpFn:
        fn = self.ops.get(node.op)
        if fn is None:
            raise RunnerError(
                f"the {self.framework} runner cannot execute {node.describe()}: no "
                f"{self.framework} kernel is known for op {node.op!r}; compare with "
                "--no-numeric")
        return fn

    def run(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """Execute ``node`` on ``inputs`` (tensors of this runner); returns its outputs."""
        out = self._fn(node)(*inputs, **node.attrs)
        return out if isinstance(out, tuple) else (out,)

    @abc.abstractmethod
    def vjp(self, node: Node, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Pullback]:
        """Execute ``node`` and return its outputs and a pullback for its gradients."""




class ReferenceRunner(Runner):
    """The ops' NumPy references in the context's storage dtype (forward only): the runner
    for paper specs and for tests that need no framework."""

    framework = "numpy"
    differentiable = False

    def __init__(self, context: Context) -> None:
        if context.device not in ("cpu", "auto"):
            raise RunnerError("the NumPy reference runs on the CPU only; pass --device cpu")
        if context.storage not in ("float32", "float16", "float64"):
            raise RunnerError(f"NumPy has no {context.storage}; use float32 or float16")
        super().__init__(context)

    def put(self, array: np.ndarray, dtype: str) -> Any:
        target = self.context.storage if dtype in FLOAT_DTYPES else dtype
        return np.asarray(array).astype(target, copy=False)

    def fetch(self, tensor: Any) -> np.ndarray:
        return np.asarray(tensor)

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def supports(self, op: str) -> bool:
        return True

    def run(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, ...]:
        with np.errstate(all="ignore"):
            out = get_spec(node.op).reference(*inputs, **node.attrs)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(np.asarray(o).astype(self.context.storage, copy=False)
                     if np.asarray(o).dtype.kind == "f" else np.asarray(o) for o in outs)

    def vjp(self, node: Node, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Pullback]:
        raise RunnerError("the NumPy reference computes no gradients")
