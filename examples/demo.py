"""A first torchlite program: compile a small MLP and a function, check them against eager.

Run with `bash examples/run_demo.sh` (installs and builds first) or `python examples/demo.py`.
"""

import time

import torch
from torch import nn

import torchlite


# 1. A function: the decorator is all it takes.
@torchlite.compile
def gelu_residual(x, y):
    return torch.nn.functional.gelu(x @ y) + x.sum(dim=-1, keepdim=True)


# 2. A module: torchlite.compile returns a module that shares the original's parameters.
class MLP(nn.Module):
    def __init__(self, d_in=64, d_hidden=256, d_out=10):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, d_hidden), nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))).softmax(dim=-1)


def timed(fn, *args, repeat=50):
    fn(*args)  # first call captures and compiles
    start = time.perf_counter()
    for _ in range(repeat):
        out = fn(*args)
    return out, (time.perf_counter() - start) / repeat * 1e6


def main():
    torch.manual_seed(0)
    x, y = torch.randn(32, 64), torch.randn(64, 64)
    out, us = timed(gelu_residual, x, y)
    ref, us_eager = timed(gelu_residual.__wrapped__, x, y)
    torch.testing.assert_close(out, ref)
    print(f"function: matches eager  torchlite {us:8.1f} us/call  eager {us_eager:8.1f} us/call")

    model = MLP().eval()
    compiled = torchlite.compile(model)
    assert list(compiled.state_dict()) == list(model.state_dict())
    inputs = torch.randn(128, 64)
    with torch.no_grad():
        out, us = timed(compiled, inputs)
        ref, us_eager = timed(model, inputs)
    torch.testing.assert_close(out, ref)
    print(f"MLP:      matches eager  torchlite {us:8.1f} us/call  eager {us_eager:8.1f} us/call")

    print("counters:", torchlite.counters())
    report = torchlite.explain(model)(inputs)
    print(f"explain: {report.graph_count} graph(s), {report.graph_break_count} graph break(s)")


if __name__ == "__main__":
    main()
