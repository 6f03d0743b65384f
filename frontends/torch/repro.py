"""A PyTorch script that reproduces one layer's divergence alone (``--repro``)."""

from __future__ import annotations

from specgraph.frontends.torch.runner import TorchRunner
from specgraph.numeric.repro import ScriptWriter

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


write = ScriptWriter("torch", TorchRunner.ops, load=LOAD, fetch=FETCH, backward=BACKWARD)
