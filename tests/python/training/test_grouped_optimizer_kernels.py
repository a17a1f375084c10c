"""Horizontal fusion of compiled optimizer steps (issue 21 part 6): `torchlite.compile(opt.step)`
runs the per-parameter updates of SGD, Adam and AdamW as one launch per update body (a group of
kernels with the same code over different tensors, passes/group_kernels.h) instead of one per
parameter, with parameters and state equal to eager's."""

import pytest
import torch
from helpers import nvrtc_missing

import torchlite
from torchlite._optimizer import CompiledOptimizerStep

# Mixed sizes, as a model's parameters (matrices, vectors, a scalar-sized bias, an odd length).
# NOTE: some shapes twice, as a model's layers repeat them: parameters of one shape read one
# scalars tensor, which must not merge their updates into one kernel (passes/fuse.cpp)
SHAPES = [(16, 8), (8,), (3, 5, 7), (1,), (33,), (64, 40), (40,), (2, 2, 2, 2), (129,)]
SHAPES += [(16, 8), (8,), (64, 40)]

needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

CONFIGS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda ps: torch.optim.SGD(
        ps, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01
    ),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adam_amsgrad_wd_maximize": lambda ps: torch.optim.Adam(
        ps, lr=1e-2, amsgrad=True, weight_decay=0.1, maximize=True
    ),
    "adam_lr_tensor": lambda ps: torch.optim.Adam(ps, lr=torch.tensor(1e-2), foreach=False),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True),
}


def make_params(dtypes=(torch.float32,), device="cpu"):
    torch.manual_seed(0)
    return [
        torch.nn.Parameter(torch.randn(s, device=device, dtype=dtypes[i % len(dtypes)]))
        for i, s in enumerate(SHAPES)
    ]


def set_grads(params, ref, step):
    gen = torch.Generator().manual_seed(100 + step)
    for p, q in zip(params, ref):
        g = torch.randn(p.shape, generator=gen).to(p.dtype).to(p.device)
        p.grad, q.grad = g.clone(), g.clone()


def check_state(opt, ref, tol):
    ps = [p for g in opt.param_groups for p in g["params"]]
    qs = [q for g in ref.param_groups for q in g["params"]]
    for p, q in zip(ps, qs):
        torch.testing.assert_close(p, q, rtol=tol, atol=tol)
        sp, sq = opt.state[p], ref.state[q]
        assert sp.keys() == sq.keys()
        for k in sp:
            if isinstance(sp[k], torch.Tensor):
                torch.testing.assert_close(sp[k], sq[k], rtol=tol, atol=tol, msg=k)


def launches(step):
    before = torchlite.counters()["kernel_launches"]
    step()
    return torchlite.counters()["kernel_launches"] - before


def run(make_opt, steps=3, dtypes=(torch.float32,), device="cpu", sched=None, options=None):
    """Compiled and eager steps side by side; returns (compiled step, launches per step)."""
    params = make_params(dtypes, device)
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt, ref = make_opt(params), make_opt(ref_params)
    scheds = (sched(opt), sched(ref)) if sched else ()
    step = torchlite.compile(opt.step, options=options)
    assert isinstance(step, CompiledOptimizerStep)
    tol = 2e-2 if torch.bfloat16 in dtypes else 1e-5
    per_step = []
    for i in range(steps):
        set_grads(params, ref_params, i)
        per_step.append(launches(step))
        ref.step()
        for s in scheds:
            s.step()
        check_state(opt, ref, tol)
    return step, per_step


def compiled_steps(step, per_step):
    """Launch counts of the steps torchlite's kernels ran (SGD's first step is torch's)."""
    return per_step[1:] if step.eager_steps else per_step


@needs_cpu_kernels
@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_launch_per_step_matches_eager(name):
    step, per_step = run(CONFIGS[name])
    # every parameter's update in one launch (before: one launch per parameter)
    assert compiled_steps(step, per_step) == [1] * len(compiled_steps(step, per_step))
    assert step.last_compiled.kernel_count == len(SHAPES)
    assert len(step.cache) == 1  # the step count and lr never recompile


@needs_cpu_kernels
def test_without_grouping_each_parameter_is_a_launch():
    _, per_step = run(CONFIGS["adamw"], options={"group_kernels": False})
    assert per_step == [len(SHAPES)] * 3


@needs_cpu_kernels
@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_mixed_dtypes_group_per_dtype(name):
    # f32 and bf16 parameters in one group: an update body per dtype, each one launch
    step, per_step = run(CONFIGS[name], dtypes=(torch.float32, torch.bfloat16))
    assert compiled_steps(step, per_step)[-1] == 2


@needs_cpu_kernels
def test_param_groups_each_one_launch():
    def make(ps):
        return torch.optim.AdamW(
            [
                {"params": ps[:3]},
                {"params": ps[3:6], "lr": 3e-2, "weight_decay": 0.0},
                {"params": ps[6:], "betas": (0.8, 0.95), "amsgrad": True},
            ],
            lr=1e-2,
            weight_decay=0.1,
        )

    step, per_step = run(make)
    assert per_step == [3, 3, 3]
    assert len(step.cache) == 3  # one graph per group


@needs_cpu_kernels
@pytest.mark.parametrize("name", ["sgd_nesterov_wd", "adam", "adamw_amsgrad"])
def test_scheduler_lr_changes_never_recompile(name):
    def sched(o):
        return torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)

    step, per_step = run(CONFIGS[name], steps=5, sched=sched)
    assert len(step.cache) == 1
    assert compiled_steps(step, per_step)[-1] == 1


@needs_cpu_kernels
def test_large_parameters_spread_over_threads_and_match():
    # big enough for the parallel path (kSerialElements), members of very different sizes
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n)) for n in (300_000, 7, 70_001, 1)]
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    ref = torch.optim.AdamW(ref_params, lr=1e-2, weight_decay=0.1)
    step = torchlite.compile(opt.step)
    for i in range(3):
        set_grads(params, ref_params, i)
        assert launches(step) == 1
        ref.step()
        check_state(opt, ref, 1e-5)


@needs_cpu_kernels
def test_group_kernels_option_groups_independent_pointwise_kernels():
    def f(a, b, c, d):
        return a * 2 + 1, b * 2 + 1, c * 2 + 1, (d * 3).sin()

    args = [torch.randn(s) for s in [(5, 3), (7,), (2, 9, 4), (11,)]]
    expect = f(*args)
    counts = {}
    for group in (False, True):
        torchlite.reset()
        g = torchlite.compile(f, options={"group_kernels": group})
        g(*args)
        before = torchlite.counters()["kernel_launches"]
        out = g(*args)
        counts[group] = torchlite.counters()["kernel_launches"] - before
        for o, e in zip(out, expect):
            torch.testing.assert_close(o, e)
    assert counts == {False: 4, True: 2}  # the three `* 2 + 1` kernels, then the sine


@needs_cpu_kernels
def test_dependent_kernels_are_not_grouped():
    def f(a, b):
        x = (a * 2 + 1).sum(0)  # a reduction between: x depends on the first kernel
        return x * 2 + 1, b * 2 + 1

    a, b = torch.randn(6, 5), torch.randn(5)
    g = torchlite.compile(f, options={"group_kernels": True})
    for o, e in zip(g(a, b), f(a, b)):
        torch.testing.assert_close(o, e)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["sgd_nesterov_wd", "adam_amsgrad_wd_maximize", "adamw"])
@pytest.mark.parametrize("dtypes", [(torch.float32,), (torch.float32, torch.bfloat16)])
def test_grouped_steps_on_cuda(name, dtypes):
    step, per_step = run(CONFIGS[name], dtypes=dtypes, device="cuda")
    # one launch per (dtype, code): numel-1 parameters have a code of their own
    assert compiled_steps(step, per_step)[-1] <= 2 * len(dtypes)
    assert len(step.cache) == 1


@pytest.mark.skipif(bool(nvrtc_missing()), reason="NVRTC not loadable")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_group_entry_compiles_with_nvrtc(dtype):
    def f(a, b, c, d):
        return a * 2 + b, c * 2 + d

    args = [torch.randn(s, dtype=dtype) for s in [(8, 4), (8, 4), (2, 8, 4), (2, 8, 4)]]
    g = torchlite.explain(f)(*args).graphs[0]
    kernels = torchlite._C.cuda_kernel_sources(g, "compute_90", group_kernels=True)
    assert len(kernels) == 2
    for name, source, ptx, launch in kernels:
        assert launch["group_name"] == name + "_g"
        assert 2 <= launch["group_members"] <= 64 and launch["group_bytes"] <= 4096
        assert f".entry {name}_g(".encode() in ptx
        assert "tl_d.v[" in source  # runtime sizes: one code serves both members
    # the two kernels share one text (their names aside)
    (n0, s0, _, _), (n1, s1, _, _) = kernels
    assert s0.replace(n0, "@") == s1.replace(n1, "@")
    # without grouping: no group entry
    plain = torchlite._C.cuda_kernel_sources(g, "compute_90", compile=False)
    assert all(launch["group_name"] == "" for *_, launch in plain)
