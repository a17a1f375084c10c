"""mode="max-autotune": the torch calls that each form of a matrix product with a bias runs, for
the compile-time trials of pipeline/matmul_epilogues.h (which times them with CUDA events and
caches the choice on disk).

Each callable queues what its form costs beyond what every form shares: the product itself
(bias in cuBLAS's call, without bias, or with bias and activation in cuBLASLt's epilogue), plus
the activation's own kernel where the cuBLASLt form makes it go away (the activation's result
read only by extern calls). A bias added in a kernel of ours that runs anyway costs no pass,
except where the product is also a graph output (a training forward's pre-activation, saved for
backward): that kernel then writes the sum too, one more pass over the product, timed as a fill.
"""

import torch
import torch.nn.functional as F

# Tests: `timer(site, label) -> microseconds` in place of timing on a GPU; with it set the
# trials also run for CPU graphs (the choice, its disk cache and the rewrites, without a GPU).
timer = None


def fake_timer():
    """The test timer now set, or None (read by the C++ pass on every compile)."""
    return timer


def calls(site: dict) -> dict:
    """{label: callable} for one site (the dict pipeline/matmul_epilogues.cpp builds)."""
    dev, dtype = site["device"], site["dtype"]

    def operand(sizes, strides):
        return torch.empty_strided(sizes, strides, dtype=dtype, device=dev).normal_()

    x = operand(*site["input"])
    w = operand(*site["weight"])
    b = torch.randn(site["n"], dtype=dtype, device=dev)
    linear = site["linear"]
    act = site["activation"]
    use_gelu = act == "gelu"

    def act_kernel(y):
        if act and site["activation_alone"]:
            F.gelu(y, approximate="tanh") if use_gelu else torch.relu(y)

    def addmm():
        act_kernel(F.linear(x, w, b) if linear else torch.addmm(b, x, w))

    saved = (
        torch.empty(site["m"], site["n"], dtype=dtype, device=dev) if site["product_out"] else None
    )

    def mm_bias():
        act_kernel(F.linear(x, w) if linear else torch.mm(x, w))
        if saved is not None:
            saved.fill_(1)

    def activation():
        x2 = x.reshape(-1, site["k"])
        torch._addmm_activation(b, x2, w.t() if linear else w, use_gelu=use_gelu)

    return {
        "addmm": addmm,
        "mm+bias": mm_bias,
        "addmm_activation(relu)": activation,
        "addmm_activation(gelu)": activation,
    }
