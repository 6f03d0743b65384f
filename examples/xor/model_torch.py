"""XOR + linear regression with one hidden layer; `forgot_activation` drops the ReLU."""

import torch
from torch import nn

# The four XOR corners: the example batch the factories hand to a tracer.
CORNERS = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float32)


class XorRegressor(nn.Module):
    """Two tasks from one hidden layer: an XOR logit and a linear-regression prediction."""

    def __init__(self, hidden: int = 8, activation: bool = True) -> None:
        super().__init__()
        self.activation = activation
        self.hidden = nn.Linear(2, hidden)
        self.act = nn.ReLU()
        self.head = nn.Linear(hidden, 2)  # column 0: XOR logit, column 1: regression

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.hidden(x)
        if self.activation:  # forgot_activation() skips this: the model is then linear
            h = self.act(h)
        out = self.head(h)
        return {"xor_logit": out[:, 0], "regression": out[:, 1]}


def correct():
    """The model as specified: hidden layer, ReLU, head."""
    torch.manual_seed(0)
    return XorRegressor(activation=True), (CORNERS.clone(),)


def forgot_activation():
    """Same weights, but the forward pass never applies the ReLU."""
    torch.manual_seed(0)
    return XorRegressor(activation=False), (CORNERS.clone(),)


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (x, xor_target, regression_target) for n noisy corners of the unit square.

    XOR targets (0/1) come from the clean bits; the regression target
    y = 1.5*x1 - 2.0*x2 + 0.5 is computed from the noisy inputs.
    """
    gen = torch.Generator().manual_seed(seed)
    bits = torch.randint(0, 2, (n, 2), generator=gen).to(torch.float32)
    x = bits + 0.1 * torch.randn(n, 2, generator=gen)
    xor = (bits[:, 0] != bits[:, 1]).to(torch.float32)
    y = 1.5 * x[:, 0] - 2.0 * x[:, 1] + 0.5
    return x, xor, y
