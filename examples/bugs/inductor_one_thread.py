"""PyTorch 2.13's inductor, on one CPU thread, zeroes a CNN's gradients below its max pool.

Plain PyTorch, no specgraph: a small CNN (the test zoo's) with a zero that requires a
gradient added at the first ReLU and after the second conv, BatchNorm and ReLU (how
specgraph observes the gradient at a value in a compiled program). Eager autograd against
``torch.compile``:

    OMP_NUM_THREADS=1 python examples/bugs/inductor_one_thread.py   # compiled: zeros
    OMP_NUM_THREADS=2 python examples/bugs/inductor_one_thread.py   # agrees
"""

import torch
import torch.nn.functional as F

torch.manual_seed(0)
x = torch.randn(2, 3, 16, 16)
w = torch.randn(8, 3, 3, 3, requires_grad=True)
b = torch.randn(8, requires_grad=True)
g = torch.rand(8, requires_grad=True)
beta = torch.randn(8, requires_grad=True)
mean, var = torch.randn(8), torch.rand(8) + 0.5
w2 = torch.randn(12, 8, 3, 3, requires_grad=True)
g2 = torch.rand(12, requires_grad=True)
beta2 = torch.randn(12, requires_grad=True)
mean2, var2 = torch.randn(12), torch.rand(12) + 0.5
hw = torch.randn(5, 12, requires_grad=True)
hb = torch.randn(5, requires_grad=True)
zeros = {"r": torch.zeros(2, 8, 16, 16, requires_grad=True),
         "c2": torch.zeros(2, 12, 4, 4, requires_grad=True),
         "n2": torch.zeros(2, 12, 4, 4, requires_grad=True),
         "r2": torch.zeros(2, 12, 4, 4, requires_grad=True)}


def net(x, w, b, g, beta, w2, g2, beta2, hw, hb, z):
    c = F.conv2d(x, w, b, padding=1)
    n = F.batch_norm(c, mean, var, g, beta, False, 0.1, 1e-5)
    r = torch.relu(n) + z["r"]
    m = F.max_pool2d(r, 2, 2)
    c2 = F.conv2d(m, w2, None, stride=2, padding=1) + z["c2"]
    n2 = F.batch_norm(c2, mean2, var2, g2, beta2, False, 0.1, 1e-3) + z["n2"]
    r2 = torch.relu(n2) + z["r2"]
    a = F.avg_pool2d(r2, 2, ceil_mode=True)
    f = torch.flatten(F.adaptive_avg_pool2d(a, 1), 1)
    return F.linear(f, hw, hb), c, n, r, m, c2, n2, r2, a, f


leaves = [w, b, g, beta, w2, g2, beta2, hw, hb]
ct = torch.randn(2, 5)


def grads(fn):
    out = fn(x, *leaves, zeros)[0]
    return torch.autograd.grad([out], leaves + list(zeros.values()), grad_outputs=[ct])


eager, compiled = grads(net), grads(torch.compile(net))
print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
for name, e, c in zip(["conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "conv2.weight"],
                      eager, compiled):
    print(f"{name}: eager max |g| {e.abs().max().item():.3g}, compiled "
          f"{c.abs().max().item():.3g}, apart by {(e - c).abs().max().item():.3g}")
