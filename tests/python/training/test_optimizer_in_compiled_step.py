"""`opt.step()` called inside a compiled training step (issue 21): SGD/Adam/AdamW run as
torchlite's compiled optimizer step (fused in-place kernels) at an `optimizer_step` graph break,
other optimizers as torch's whole step; `opt.zero_grad()` and an LR scheduler in the same
function do not recompile per step. And the compiled step's memory-sharing check runs every
step: a gradient re-bound to another parameter's memory is seen."""

import gc
import weakref

import pytest
import torch

import torchlite
from torchlite import _optimizer


def make_model(device="cpu"):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 1)).to(
        device
    )


def make_train_step(model, opt, sched, set_to_none=True):
    def train_step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        if sched is not None:
            sched.step()
        return loss

    return train_step


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
}


def run_both(make_opt, steps, device="cpu", with_sched=True, tol=(None, None)):
    """Compiled and eager training steps side by side; returns (model, opt, compiled fn)."""
    model, ref_model = make_model(device), make_model(device)
    opt, ref_opt = make_opt(model.parameters()), make_opt(ref_model.parameters())
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, 0.8) if with_sched else None
    ref_sched = torch.optim.lr_scheduler.ExponentialLR(ref_opt, 0.8) if with_sched else None
    step = torchlite.compile(make_train_step(model, opt, sched))
    ref_step = make_train_step(ref_model, ref_opt, ref_sched)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(5, 6, generator=gen).to(device)
        y = torch.randn(5, 1, generator=gen).to(device)
        torch.testing.assert_close(step(x, y), ref_step(x, y), rtol=tol[0], atol=tol[1])
        for p, q in zip(model.parameters(), ref_model.parameters()):
            torch.testing.assert_close(p, q, rtol=tol[0], atol=tol[1])
            assert p.grad is None and q.grad is None
        for s, r in zip(opt.state.values(), ref_opt.state.values()):
            for k in s:
                torch.testing.assert_close(s[k], r[k], rtol=tol[0], atol=tol[1], msg=k)
        if with_sched:
            assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
    return model, opt, step


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_step_inside_compiled_function_runs_the_fused_step(name):
    run_both(OPTIMIZERS[name], steps=2)  # warm: every frame of the function captured
    torchlite.reset_counters()
    model, opt, _ = run_both(OPTIMIZERS[name], steps=5)
    counts = torchlite.counters()
    # a new model/optimizer pair is new objects: the first call captures, later ones never
    assert counts["recompiles"] == 0
    compiled = _optimizer.compiled_step_of(opt)
    assert compiled is not None and len(compiled.cache) == 1  # LR changes: the same graph
    # only SGD's first step (it makes the momentum buffers) runs torch's own step
    assert compiled.eager_steps == (1 if name.startswith("sgd") else 0)
    if torchlite._C.has_llvm:
        n = len(list(model.parameters()))
        assert compiled.last_compiled.kernel_count == n
        assert compiled.last_compiled.in_place_stores >= n


def test_frames_are_captured_once_over_the_steps():
    torchlite.reset_counters()
    run_both(OPTIMIZERS["adamw"], steps=2)
    frames = torchlite.counters()["frames"]
    torchlite.reset_counters()
    _model, _opt, step = run_both(OPTIMIZERS["adamw"], steps=6)
    # the same code objects, new objects behind their globals/closures: captured anew per
    # object set, not per step
    assert torchlite.counters()["frames"] <= frames
    report = torchlite.explain(step)(torch.randn(5, 6), torch.randn(5, 1))
    assert "optimizer_step" in [b.kind for b in report.break_reasons]


def test_optimizer_and_its_compiled_step_are_freed():
    _model, opt, step = run_both(OPTIMIZERS["adamw"], steps=2, with_sched=False)
    compiled = weakref.ref(_optimizer.compiled_step_of(opt))
    opt_ref = weakref.ref(opt)
    del _model, opt, step
    gc.collect()
    assert opt_ref() is None and compiled() is None


def test_zero_grad_without_set_to_none_and_no_scheduler():
    model, ref_model = make_model(), make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref_model.parameters(), lr=1e-2)
    step = torchlite.compile(make_train_step(model, opt, None, set_to_none=False))
    ref_step = make_train_step(ref_model, ref_opt, None, set_to_none=False)
    for i in range(4):
        x, y = torch.randn(5, 6), torch.randn(5, 1)
        torch.testing.assert_close(step(x, y), ref_step(x, y))
        for p, q in zip(model.parameters(), ref_model.parameters()):
            torch.testing.assert_close(p, q)
            torch.testing.assert_close(p.grad, q.grad)  # zeros, kept
    assert _optimizer.compiled_step_of(opt).eager_steps == 0


def test_optimizer_torchlite_does_not_compile_runs_torchs_step_every_call():
    # NOTE: RMSprop with a scheduler: its wrapped step once ran at trace time only (skipped
    # by every later call); now it is a break and runs eagerly, whole, on each call.
    _model, opt, step = run_both(lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5), steps=4)
    assert _optimizer.compiled_step_of(opt) is None
    report = torchlite.explain(step)(torch.randn(5, 6), torch.randn(5, 1))
    kinds = [b.kind for b in report.break_reasons]
    assert "optimizer_step" in kinds


def test_subclass_step_calling_super_step():
    class MyAdam(torch.optim.Adam):
        def step(self, closure=None):
            self.calls = getattr(self, "calls", 0) + 1
            return super().step(closure)

    _model, opt, _ = run_both(lambda ps: MyAdam(ps, lr=1e-2), steps=3, with_sched=False)
    assert opt.calls == 3


def test_gradient_rebound_to_another_parameters_memory_runs_torchs_step():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)) for _ in range(3)]
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    ref = torch.optim.SGD(ref_params, lr=0.1, momentum=0.9)
    step = torchlite.compile(opt.step)
    for i in range(6):
        for p, q in zip(params, ref_params):
            g = torch.randn(p.shape)
            p.grad, q.grad = g.clone(), g
        # NOTE: the same layouts as every other step, only the memory is shared. torch's step
        # reads every gradient before it writes a parameter; in-place kernels, one parameter
        # after another, would read parameter 0 already updated.
        if i in (2, 4):
            params[2].grad = params[0].detach()
            ref_params[2].grad = ref_params[0].detach()
        if i == 3:
            params[1].grad = opt.state[params[0]]["momentum_buffer"]
            ref_params[1].grad = ref.state[ref_params[0]]["momentum_buffer"]
        step()
        ref.step()
        for p, q in zip(params, ref_params):
            torch.testing.assert_close(p, q)
            for k in opt.state[p]:
                torch.testing.assert_close(opt.state[p][k], ref.state[q][k], msg=k)
    # step 0 makes the momentum buffers; steps 2-4 share memory
    assert step.eager_steps == 4 and "shares memory" in step.last_eager_reason
    assert len(step.cache) == 1  # the compiled steps around them reuse one graph


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["adamw", "sgd_momentum"])
def test_step_inside_compiled_function_on_cuda(name):
    _model, opt, _ = run_both(OPTIMIZERS[name], steps=4, device="cuda", tol=(1e-4, 1e-5))
    compiled = _optimizer.compiled_step_of(opt)
    assert compiled is not None and len(compiled.cache) == 1
