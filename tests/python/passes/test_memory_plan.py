"""The memory plan is part of the schedule the passes make (passes/memory_plan.cpp,
ir::StepMemory): which steps never run, which view a kernel's output is allocated as, and after
which step each value is released. The runtime only executes it; the plan is read here without
running anything, and the compiled results still match eager."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def _plan(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return graph, _C.partition_summary(graph)


def _output_names(graph):
    (out,) = [n for n in graph.nodes() if n["op"] == "output"]
    return {a.name for a in out["args"] if isinstance(a, _C.NodeRef)}


def _viewed_projection(x, w):
    # NOTE: a reduction's result in the product, so the view stays after the kernel
    # (passes/move_reshapes.h moves a view above pointwise ops of values in memory only).
    h = (x - x.mean(-1, keepdim=True)).view(-1, x.shape[-1])
    return h @ w


def _mlp(x, w1, w2):
    h = F.gelu(x @ w1)
    return torch.softmax(h @ w2, -1)


def _norm_then_project(x, w, b):
    h = F.layer_norm(x, x.shape[-1:]) * 2
    y = torch.addmm(b, h.view(-1, h.shape[-1]), w)
    return y.view(x.shape[0], x.shape[1], -1)


CASES = {
    "viewed_projection": (_viewed_projection, lambda: (torch.randn(2, 3, 4), torch.randn(4, 5))),
    "mlp": (_mlp, lambda: (torch.randn(6, 8), torch.randn(8, 16), torch.randn(16, 4))),
    "norm_then_project": (
        _norm_then_project,
        lambda: (torch.randn(2, 5, 8), torch.randn(8, 6), torch.randn(6)),
    ),
}


@needs_cpu_kernels
def test_a_view_of_a_kernel_output_is_folded_into_its_allocation_by_the_plan():
    torchlite.reset()
    _, s = _plan(_viewed_projection, *CASES["viewed_projection"][1]())
    assert len(s["memory"]) == len(s["order"])
    skipped = {s["order"][i] for i, m in enumerate(s["memory"]) if m["skip"]}
    kernel_steps = [m for step, m in zip(s["order"], s["memory"]) if step.startswith("kernel")]
    allocated_as = {name for m in kernel_steps for name in m["outputs"]}
    # the view step never runs: the kernel's output is allocated as the view itself
    assert skipped and skipped <= allocated_as, (skipped, allocated_as)


@needs_cpu_kernels
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_intermediate_is_released_after_it_is_made_and_outputs_never(name):
    fn, make = CASES[name]
    torchlite.reset()
    graph, s = _plan(fn, *make())
    inputs = {n["name"] for n in graph.nodes() if n["op"] == "placeholder"}
    outputs = _output_names(graph)
    made = {}  # value -> the step that makes it
    for i, (step, m) in enumerate(zip(s["order"], s["memory"])):
        for value in m["outputs"] if step.startswith("kernel") else [step]:
            made.setdefault(value, i)
    released = {}
    for i, m in enumerate(s["memory"]):
        for value in m["release_after"]:
            assert value not in outputs, value
            if value in inputs:
                # NOTE: the runtime's reference, after its last reader: a caller that handed its
                # inputs over (a training backward's saved values) frees them there.
                assert value not in released, value
                released[value] = i
                continue
            assert made[value] <= i, (value, made[value], i)
            released.setdefault(value, i)
    assert set(made) - outputs <= set(released), set(made) - outputs - set(released)
    # and running that plan gives eager's values
    args = make()
    torch.testing.assert_close(torchlite.compile(fn, fullgraph=True)(*args), fn(*args))


@needs_cpu_kernels
def test_a_value_read_by_a_later_step_is_not_released_before_it():
    torchlite.reset()
    _, s = _plan(_mlp, *CASES["mlp"][1]())
    release_step = {n: i for i, m in enumerate(s["memory"]) for n in m["release_after"]}
    for i, (step, m) in enumerate(zip(s["order"], s["memory"])):
        if step.startswith("kernel"):
            for name in m["inputs"]:
                assert release_step.get(name, len(s["order"])) >= i, (name, i)
