"""torchlite.compile(opt.step): SGD, Adam and AdamW steps run as fused kernels that update the
parameters and state in place, equal to eager's steps (issue 21 part 6)."""

import copy

import pytest
import torch

import torchlite
from torchlite._optimizer import CompiledOptimizerStep

SHAPES = [(6, 5), (5,), (3, 4, 7), (1,), (33,)]


def make_params(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, dtype=dtype, device=device)) for s in SHAPES]


def set_grads(params, ref, step, none_every=0):
    gen = torch.Generator().manual_seed(100 + step)
    for i, (p, q) in enumerate(zip(params, ref)):
        if none_every and (i + step) % none_every == 0:
            p.grad = q.grad = None  # zero_grad(set_to_none=True) on some parameters
            continue
        g = torch.randn(p.shape, generator=gen).to(p.dtype).to(p.device)
        p.grad, q.grad = g.clone(), g.clone()


def check_state(opt, ref, rtol=None, atol=None):
    for p, q in zip(opt_params(opt), opt_params(ref)):
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol)
        sp, sq = opt.state.get(p, {}), ref.state.get(q, {})
        assert sp.keys() == sq.keys()
        for k in sp:
            if isinstance(sp[k], torch.Tensor):
                torch.testing.assert_close(sp[k], sq[k], rtol=rtol, atol=atol, msg=k)


def opt_params(opt):
    return [p for g in opt.param_groups for p in g["params"]]


def run_parity(make_opt, steps=5, none_every=0, dtype=torch.float32, tol=(None, None), sched=None):
    params = make_params(dtype)
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt, ref = make_opt(params), make_opt(ref_params)
    scheds = (sched(opt), sched(ref)) if sched else ()
    step = torchlite.compile(opt.step)
    assert isinstance(step, CompiledOptimizerStep)
    ptrs = [p.data_ptr() for p in params]
    for i in range(steps):
        set_grads(params, ref_params, i, none_every)
        step()
        ref.step()
        for s in scheds:
            s.step()
        check_state(opt, ref, *tol)
    assert [p.data_ptr() for p in params] == ptrs  # updated in place
    return step


CONFIGS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda ps: torch.optim.SGD(
        ps, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01
    ),
    "sgd_dampening_maximize": lambda ps: torch.optim.SGD(
        ps, lr=0.05, momentum=0.5, dampening=0.3, maximize=True, foreach=False
    ),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adam_single_tensor": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=False),
    "adam_amsgrad_wd": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, weight_decay=0.1),
    "adam_maximize_betas": lambda ps: torch.optim.Adam(
        ps, lr=1e-2, betas=(0.3, 0.9), maximize=True, weight_decay=0.05
    ),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True, foreach=False),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_steps_match_eager(name):
    step = run_parity(CONFIGS[name])
    # one graph for every step (SGD's first step, making the momentum buffers, runs eagerly)
    assert len(step.cache) == 1
    assert step.eager_steps == (1 if "momentum" in name or "nesterov" in name else 0) + (
        1 if "dampening" in name else 0
    )
    compiled = step.last_compiled
    if torchlite._C.has_llvm:  # NOTE: without LLVM, CPU graphs run op by op (values checked above)
        assert compiled.kernel_count == len(SHAPES)  # one fused kernel per parameter
        assert compiled.in_place_stores >= len(SHAPES)


@pytest.mark.parametrize("name", ["sgd_momentum", "adam", "adamw_amsgrad"])
def test_gradients_set_to_none_are_skipped(name):
    run_parity(CONFIGS[name], steps=6, none_every=3)


@pytest.mark.parametrize("name", ["sgd_nesterov_wd", "adam", "adamw"])
def test_lr_scheduler_changes_lr_without_recompiling(name):
    step = run_parity(
        CONFIGS[name], steps=6, sched=lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.7)
    )
    assert len(step.cache) == 1


def test_param_groups_with_their_own_hyperparameters():
    def make(ps):
        return torch.optim.AdamW(
            [{"params": ps[:2]}, {"params": ps[2:], "lr": 3e-2, "weight_decay": 0.0}], lr=1e-2
        )

    step = run_parity(make)
    assert len(step.cache) == 2  # one graph per group


def test_bfloat16_params_match_eager_within_bf16_tolerance():
    run_parity(CONFIGS["adamw"], dtype=torch.bfloat16, tol=(2e-2, 2e-2))


def test_compiling_after_the_scheduler_wrapped_step():
    params = make_params()
    opt = torch.optim.Adam(params, lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    step = torchlite.compile(opt.step)  # the scheduler's wrapper of opt.step
    assert isinstance(step, CompiledOptimizerStep) and step.optimizer is opt
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    ref = torch.optim.Adam(ref_params, lr=1e-2)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref, 1, gamma=0.5)
    for i in range(3):
        set_grads(params, ref_params, i)
        step()
        ref.step()
        sched.step()
        ref_sched.step()
        check_state(opt, ref)


def test_step_hooks_run_torchs_step():
    params = make_params()
    opt = torch.optim.SGD(params, lr=0.1)
    calls = []
    opt.register_step_post_hook(lambda o, a, k: calls.append(1))
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    ref = torch.optim.SGD(ref_params, lr=0.1)
    step = torchlite.compile(opt.step)
    set_grads(params, ref_params, 0)
    step()
    ref.step()
    check_state(opt, ref)
    assert calls == [1] and step.eager_steps == 1 and "hooks" in step.last_eager_reason


def test_closure_is_called_and_its_loss_returned():
    params = make_params()
    opt = torch.optim.Adam(params, lr=1e-2)
    step = torchlite.compile(opt.step)

    def closure():
        opt.zero_grad()
        loss = sum((p * p).sum() for p in params)
        loss.backward()
        return loss

    loss = step(closure)
    assert loss.requires_grad and torch.isfinite(loss)
    assert all(p.grad is not None for p in params)


def test_parameters_on_disjoint_parts_of_a_storage_are_updated_in_place():
    base = torch.randn(10)
    a = torch.nn.Parameter(base[:5].detach())
    b = torch.nn.Parameter(base[5:].detach())  # the same storage as a, other elements
    ra, rb = torch.nn.Parameter(a.detach().clone()), torch.nn.Parameter(b.detach().clone())
    opt, ref = torch.optim.Adam([a, b], lr=0.1), torch.optim.Adam([ra, rb], lr=0.1)
    step = torchlite.compile(opt.step)
    for i in range(3):
        set_grads([a, b], [ra, rb], i)
        step()
        ref.step()
        check_state(opt, ref)
    if torchlite._C.has_llvm:
        # NOTE: no memory shared, so the kernels store parameters and state in place (2 x 3)
        assert step.last_compiled.in_place_stores == 6 and step.last_compiled.kernel_count == 2
    torch.testing.assert_close(base, torch.cat([ra.detach(), rb.detach()]))


def test_copy_of_optimizer_is_independent():
    params = make_params()
    opt = torch.optim.SGD(params, lr=0.1)
    other = copy.deepcopy(opt)
    step = torchlite.compile(opt.step)
    assert step.optimizer is opt and step.optimizer is not other


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["sgd_nesterov_wd", "adam_amsgrad_wd", "adamw"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_steps_match_eager_on_cuda(name, dtype):
    params = make_params(dtype, "cuda")
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt, ref = CONFIGS[name](params), CONFIGS[name](ref_params)
    step = torchlite.compile(opt.step)
    tol = (2e-2, 2e-2) if dtype == torch.bfloat16 else (1e-5, 1e-5)
    for i in range(5):
        set_grads(params, ref_params, i)
        step()
        ref.step()
        for g in (*opt.param_groups, *ref.param_groups):
            g["lr"] *= 0.8
        check_state(opt, ref, *tol)
    assert len(step.cache) == 1
    assert step.last_compiled.in_place_stores >= len(SHAPES)
