"""A PyTorch script that reproduces one layer's divergence alone (``--repro``)."""

from __future__ import annotations

from typing import Any

from specgraph.frontends.torch.runner import TorchRunner
from specgraph.numeric.repro import ScriptWriter, literal

__all__ = ["write"]

LOAD = "torch.from_numpy(np.ascontiguousarray(x))"
FETCH = "t.detach().cpu().double().numpy()"
BACKWARD = '''    xs = [x.requires_grad_() if x.is_floating_point() else x for x in xs]
    outs = fn(*xs, **ATTRS)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
    floats = [x for x in xs if x.is_floating_point()]
    got = torch.autograd.grad([o for o, _ in pairs], floats,
                              grad_outputs=[to_framework(g) for _, g in pairs],
                              allow_unused=True)
    got = iter(got)
    grads_in = [next(got) if x.is_floating_point() else None for x in xs]'''

COMPILE = "fn = torch.compile(_eager, dynamic=False)"


def call(op: str, args: Any, kwargs: Any) -> str:
    """``fn`` as the ATen op ``op`` (``aten.NAME.OVERLOAD``, plain identifiers:
    ``TorchProgram.native_call``) called with the model's own arguments, each
    ``("input", k)`` the script's k-th input."""
    return (f"OP = torch.ops.{op}\n"
            f"ARGS = {literal(args)}\n"
            f"KWARGS = {literal(kwargs)}\n"
            "\n\n"
            "def _put(a, xs):\n"
            "    if isinstance(a, tuple) and len(a) == 2 and a[0] == 'input':\n"
            "        return xs[a[1]]\n"
            "    if isinstance(a, (list, tuple)):\n"
            "        return type(a)(_put(b, xs) for b in a)\n"
            "    return a\n"
            "\n\n"
            "def fn(*xs, **_attrs):\n"
            "    return OP(*_put(ARGS, xs), **{k: _put(v, xs) for k, v in KWARGS.items()})\n")


write = ScriptWriter("torch", TorchRunner.ops, load=LOAD, fetch=FETCH, backward=BACKWARD,
                     compile=COMPILE, call=call)
