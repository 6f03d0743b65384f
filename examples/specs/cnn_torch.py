"""The small CNN of small_cnn.spec.yaml in PyTorch."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, channels: int = 8, classes: int = 10, act: bool = True) -> None:
        super().__init__()
        self.stage1 = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
            nn.ReLU(), nn.MaxPool2d(2))
        self.stage2 = nn.Sequential(
            nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * channels), nn.SiLU() if act else nn.Identity())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.stage2(self.stage1(image))).flatten(1))


def cnn():
    torch.manual_seed(0)
    return SmallCNN().eval(), (torch.randn(2, 3, 16, 16),)


def cnn_no_activation():
    """The second stage's activation forgotten: the paper says there is one."""
    torch.manual_seed(0)
    return SmallCNN(act=False).eval(), (torch.randn(2, 3, 16, 16),)
