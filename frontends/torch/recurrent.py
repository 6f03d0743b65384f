"""PyTorch's recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``), written out step by step.

torch.export keeps each as one fused ATen op (``aten.lstm.input``...). Its converter here
writes the cell PyTorch documents, one step after another, as a port written cell by cell
writes it: at step t, ``x_t = x[:, t]`` (``x[t]`` sequence-first), the gates
``linear(x_t, W_ih, b_ih) + linear(h, W_hh, b_hh)`` split into PyTorch's order, their
activations, and the new state; the output sequence is the states stacked along the time
axis, each layer reading the one below, a reverse direction reading the steps backwards
and its states joined to the forward ones along the features. ``h_n`` (and ``c_n``) stack
each layer's and direction's last state. A layer and its port in another framework then
meet gate by gate: a gate order, a recurrent activation, where GRU's reset gate applies
are differences of the graph.

The model's program keeps the fused op: its outputs are what the numbers observe (the
steps in between are the graph's replay). Longer sequences than ``UNROLL_LIMIT`` steps, and
LSTMs with a projection (``proj_size``), stay one opaque op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends.torch.ops import shape_of

__all__ = ["CONVERTERS", "UNROLL_LIMIT"]

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register

UNROLL_LIMIT = 64  # steps written out (as JAX's ``scan``); a longer sequence stays opaque

_KINDS = ("lstm", "gru", "rnn_tanh", "rnn_relu")


class _Steps:
    """Emits the canonical nodes of one recurrent layer, for the converter state ``cx``."""

    def __init__(self, cx: Any, dtype: str) -> None:
        self.cx, self.dtype = cx, dtype

    def emit(self, op: str, inputs: list[Any], attrs: dict[str, Any] | None = None,
             shape: tuple[int, ...] | None = None) -> Any:
        return self.cx.emit(op, inputs, attrs or {},
                            out=(shape if shape is not None else inputs[0].shape, self.dtype))

    def take(self, x: Any, axis: int, index: int) -> Any:
        """``x`` at ``index`` along ``axis``, that axis dropped (a slice and a squeeze)."""
        piece = x.shape[:axis] + (1,) + x.shape[axis + 1:]
        sliced = self.emit("slice", [x], {"axes": (axis,), "starts": (index,),
                                          "ends": (index + 1,), "steps": (1,)}, piece)
        return self.emit("squeeze", [sliced], {"axes": (axis,)},
                         x.shape[:axis] + x.shape[axis + 1:])

    def stack(self, parts: list[Any], axis: int) -> Any:
        """``parts`` stacked along a new ``axis`` (unsqueezes and a concat)."""
        lifted = [self.emit("unsqueeze", [p], {"axes": (axis,)},
                            p.shape[:axis] + (1,) + p.shape[axis:]) for p in parts]
        if len(lifted) == 1:
            return lifted[0]
        shape = lifted[0].shape[:axis] + (len(parts),) + lifted[0].shape[axis + 1:]
        return self.emit("concat", lifted, {"axis": axis}, shape)

    def linear(self, x: Any, weight: Any, bias: Any | None) -> Any:
        out = x.shape[:-1] + (weight.shape[-1],)
        inputs = [x, weight] + ([bias] if bias is not None else [])
        return self.emit("linear", inputs, {"bias": bias is not None}, out)

    def split(self, x: Any, pieces: int) -> tuple[Any, ...]:
        size = x.shape[-1] // pieces
        if pieces == 1:
            return (x,)
        return self.cx.emit_multi("split", [x], {"axis": x.rank - 1,
                                                 "sizes": (size,) * pieces},
                                  [(x.shape[:-1] + (size,), self.dtype)] * pieces)

    def one(self) -> Any:
        return self.cx.b.constant(np.array(1.0, dtype=np.float32), self.dtype)

    def cell(self, kind: str, x: Any, state: tuple[Any, ...], weights: tuple[Any, ...]
             ) -> tuple[Any, ...]:
        """One step: the new state (h, or h and c) from the input ``x`` and ``state``."""
        w_ih, w_hh, b_ih, b_hh = weights
        h = state[0]
        if kind == "gru":  # PyTorch's GRU: the reset gate scales W_hn h + b_hn
            xr, xz, xn = self.split(self.linear(x, w_ih, b_ih), 3)
            hr, hz, hn = self.split(self.linear(h, w_hh, b_hh), 3)
            r = self.emit("sigmoid", [self.emit("add", [xr, hr])])
            z = self.emit("sigmoid", [self.emit("add", [xz, hz])])
            n = self.emit("tanh", [self.emit("add", [xn, self.emit("mul", [r, hn])])])
            keep = self.emit("mul", [self.emit("sub", [self.one(), z], shape=z.shape), n])
            return (self.emit("add", [keep, self.emit("mul", [z, h])]),)
        gates = self.emit("add", [self.linear(x, w_ih, b_ih), self.linear(h, w_hh, b_hh)])
        if kind != "lstm":
            return (self.emit("tanh" if kind == "rnn_tanh" else "relu", [gates]),)
        i, f, g, o = self.split(gates, 4)
        i, f, o = (self.emit("sigmoid", [v]) for v in (i, f, o))
        c = self.emit("add", [self.emit("mul", [f, state[1]]),
                              self.emit("mul", [i, self.emit("tanh", [g])])])
        return self.emit("mul", [o, self.emit("tanh", [c])]), c


def _recurrent(cx: Any, node: Any) -> Any:
    """``aten.lstm.input`` / ``gru.input`` / ``rnn_tanh.input`` / ``rnn_relu.input``:
    (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
    batch_first)."""
    kind = str(node.target).split(".")[1]
    x_arg, hx_arg, params, has_biases, layers, _, train, bidirectional, batch_first = \
        node.args[:9]
    shape = shape_of(x_arg)
    time_axis = 1 if batch_first and len(shape) == 3 else 0
    hx = list(hx_arg) if isinstance(hx_arg, (list, tuple)) else [hx_arg]
    per = 4 if has_biases else 2
    directions = 2 if bidirectional else 1
    hidden = shape_of(hx[0])[-1]
    if train or len(shape) != 3 or shape[time_axis] > UNROLL_LIMIT or \
            len(params) != per * layers * directions or \
            any(shape_of(params[k + 1])[-1] != hidden for k in range(0, len(params), per)):
        return cx.opaque(node)  # a projection (proj_size), an unbatched input, long input
    dtype = cx.meta(node)[0][1]
    s = _Steps(cx, dtype)
    x = cx.value(x_arg)
    states = [cx.value(h) for h in hx]  # each [layers * directions, B, H]
    steps = shape[time_axis]
    last: list[list[Any]] = [[] for _ in states]
    for layer in range(layers):
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            at = k * per
            weights = (cx.weight(params[at], "linear"), cx.weight(params[at + 1], "linear"),
                       cx.value(params[at + 2]) if has_biases else None,
                       cx.value(params[at + 3]) if has_biases else None)
            state = tuple(s.take(h, 0, k) for h in states)
            seq: list[Any] = [None] * steps
            order = range(steps - 1, -1, -1) if direction else range(steps)
            for t in order:
                state = s.cell(kind, s.take(x, time_axis, t), state, weights)
                seq[t] = state[0]
            outputs.append(seq)
            for kept, v in zip(last, state):
                kept.append(v)
        joined = [s.emit("concat", [fw, bw], {"axis": 1}, fw.shape[:-1] + (2 * hidden,))
                  for fw, bw in zip(*outputs)] if directions == 2 else outputs[0]
        x = s.stack(joined, time_axis)
    return (x, *(s.stack(kept, 0) for kept in last))


def _cell(cx: Any, node: Any) -> Any:
    """``aten.lstm_cell`` / ``gru_cell`` / ``rnn_tanh_cell`` / ``rnn_relu_cell`` (``nn.LSTMCell``
    and its kin, one step): (input, hx, w_ih, w_hh, b_ih, b_hh) -> the new state."""
    kind = str(node.target).split(".")[1][:-len("_cell")]
    x_arg, hx_arg, w_ih, w_hh = node.args[:4]
    b_ih = node.args[4] if len(node.args) > 4 else node.kwargs.get("b_ih")
    b_hh = node.args[5] if len(node.args) > 5 else node.kwargs.get("b_hh")
    hx = list(hx_arg) if isinstance(hx_arg, (list, tuple)) else [hx_arg]
    if len(shape_of(x_arg)) != 2 or (b_ih is None) != (b_hh is None):
        return cx.opaque(node)  # an unbatched step
    s = _Steps(cx, cx.meta(node)[0][1])
    weights = (cx.weight(w_ih, "linear"), cx.weight(w_hh, "linear"),
               cx.value(b_ih) if b_ih is not None else None,
               cx.value(b_hh) if b_hh is not None else None)
    state = s.cell(kind, cx.value(x_arg), tuple(cx.value(h) for h in hx), weights)
    return state if kind == "lstm" else state[0]


for _kind in _KINDS:
    _reg(f"aten.{_kind}.input")(_recurrent)
    _reg(f"aten.{_kind}_cell.default")(_cell)
