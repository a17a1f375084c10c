"""Generated kernels per compiled forward and backward (torchlite's `kernel_launches` counter,
one warm step) of a conv -> batch norm -> ReLU block and of RMSNorm / LayerNorm, at the sizes
that split their statistics (docs/reductions.md, "Batch norm backward at split sizes").
Counts, not times: eager's and torch.compile's launches on the GPU are bench/train_launches.py's.

    python bench/backward_kernels.py [--device cpu|cuda] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
)
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python", "training")
)

import torchlite


class ConvBnRelu(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def conv_bn_relu(n, c, hw, channels_last):
    def make(device):
        model = ConvBnRelu(c).to(device)
        x = torch.randn(n, c, hw, hw, device=device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)
        return model, x

    return make


def norm(kind, shape):
    def make(device):
        from test_norm_backward import NORMS

        return NORMS[kind](shape[-1]).to(device), torch.randn(*shape, device=device)

    return make


CASES = {
    **{
        f"conv-bn-relu {n}x{c}x{hw}x{hw}{' channels-last' if cl else ''}": conv_bn_relu(
            n, c, hw, cl
        )
        for n, c, hw in [(32, 64, 56), (32, 128, 28), (32, 256, 14), (64, 8, 16)]
        for cl in (False, True)
    },
    **{
        f"{kind} {'x'.join(map(str, shape))}": norm(kind, shape)
        for kind in ("llama", "layer_norm")
        for shape in [(8, 512, 768), (16, 2048, 256), (32768, 256)]
    },
}


def launches(make, device):
    torch.manual_seed(0)
    model, x = make(device)
    torchlite.reset()
    compiled = torchlite.compile(model)
    for _ in range(2):  # the second step is warm
        xx = x.clone().requires_grad_()
        torchlite.reset_counters()
        out = compiled(xx)
        forward = torchlite.counters()["kernel_launches"]
        g = torch.randn_like(out)
        torchlite.reset_counters()
        out.backward(g)
        backward = torchlite.counters()["kernel_launches"]
    return forward, backward


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"{'case':<44} {'forward':>8} {'backward':>9}")
    for name, make in CASES.items():
        if args.only not in name:
            continue
        f, b = launches(make, args.device)
        print(f"{name:<44} {f:>8} {b:>9}", flush=True)


if __name__ == "__main__":
    main()
