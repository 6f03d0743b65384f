"""ResNet-50's downsampling bottleneck (conv3_x, first block) in PyTorch, with the stride in
the first 1x1 convolution (v1, He et al. 2016) or in the 3x3 (v1.5, torchvision's)."""

import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, c_in: int = 256, width: int = 128, stride: int = 2,
                 stride_in_1x1: bool = True) -> None:
        super().__init__()
        s1, s3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = nn.Conv2d(c_in, width, 1, stride=s1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=s3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, 4 * width, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * width)
        self.relu = nn.ReLU()
        self.downsample = nn.Sequential(nn.Conv2d(c_in, 4 * width, 1, stride=stride,
                                                  bias=False), nn.BatchNorm2d(4 * width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu(self.bn1(self.conv1(x)))
        h = self.relu(self.bn2(self.conv2(h)))
        return self.relu(self.bn3(self.conv3(h)) + self.downsample(x))


def _make(stride_in_1x1: bool):
    torch.manual_seed(0)
    return Bottleneck(stride_in_1x1=stride_in_1x1).eval(), (torch.randn(2, 256, 16, 16),)


def bottleneck_v1():
    """The stride in the first 1x1 convolution, as the paper's Table 1 has it."""
    return _make(True)


def bottleneck_v15():
    """The stride in the 3x3 convolution (torchvision's ResNet, "v1.5")."""
    return _make(False)
