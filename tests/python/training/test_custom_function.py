"""A user's torch.autograd.Function inside a compiled training graph (csrc/capture/
autograd_function.cpp, torchlite/_custom_function.py): one graph instead of a break
(`autograd_function`, as transformers' phimoe and yoso broke), the user's forward in the
compiled forward and the user's backward (not a derivative of the forward) in the compiled
backward: losses and gradients equal eager's under loss.backward(), with save_for_backward,
needs_input_grad, mark_non_differentiable, once_differentiable, non-tensor arguments and the
setup_context form. A Function whose forward cannot run on meta tensors still breaks."""

import pytest
import torch
from torch.autograd.function import once_differentiable
from train_check import compiled_backward_used

import torchlite


class _RoundSTE(torch.autograd.Function):
    """round(x * w) with a straight-through backward: torch's derivative of round is zero, so a
    re-derived backward gives other gradients than the user's."""

    @staticmethod
    def forward(ctx, x, w, scale, config):
        ctx.save_for_backward(x, w)
        ctx.scale = scale * config["gain"]
        return torch.round(x * w) * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = grad * w * ctx.scale if ctx.needs_input_grad[0] else None
        gw = (grad * x * ctx.scale).sum_to_size(w.shape) if ctx.needs_input_grad[1] else None
        return gx, gw, None, None


class _TopValues(torch.autograd.Function):
    """(values, indices) with the indices non-differentiable; backward scatters into a zero
    gradient in place (as phimoe's router does)."""

    @staticmethod
    def forward(ctx, x, k: int):
        values, indices = x.topk(k, dim=-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad = torch.zeros(ctx.shape, dtype=grad_values.dtype, device=grad_values.device)
        grad.scatter_add_(-1, indices, grad_values * 3.0)  # NOTE: 3x: the user's, not torch's
        return grad, None


class _ClampGrad(torch.autograd.Function):
    """The setup_context form: forward without ctx; backward clamps the incoming gradient."""

    @staticmethod
    def forward(x, bound):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, bound = inputs
        ctx.save_for_backward(x)
        ctx.bound = bound

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad * x.cos()).clamp(-ctx.bound, ctx.bound), None


def _model(x, w, v):
    h = torch.tanh(x @ v)
    y = _RoundSTE.apply(h, w, 0.5, {"gain": 4.0})
    values, indices = _TopValues.apply(y + h, 2)
    z = _ClampGrad.apply(values, 0.05)
    return (z * indices.float()).sum() + y.square().mean()


def _inputs(grad_w=True):
    x = torch.randn(6, 5)
    w = torch.randn(4, requires_grad=grad_w)
    v = torch.randn(5, 4, requires_grad=True)
    return x, w, v


def _loss_and_grads(fn, x, w, v):
    loss = fn(x, w, v)
    loss.backward()
    return loss, [t.grad for t in (w, v) if t.requires_grad]


@pytest.mark.parametrize("grad_w", [True, False], ids=["all", "w_frozen"])
def test_custom_functions_train_in_one_graph_with_the_users_backward(grad_w):
    torch.manual_seed(0)
    args = _inputs(grad_w)
    torchlite.reset()
    report = torchlite.explain(_model)(*[a.detach().requires_grad_(a.requires_grad) for a in args])
    # NOTE: before, each Function.apply with an input that requires grad broke the graph.
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    compiled = torchlite.compile(_model)
    for step in range(3):
        torch.manual_seed(step)
        args = _inputs(grad_w)
        ref = [a.detach().requires_grad_(a.requires_grad) for a in args]
        loss, grads = _loss_and_grads(compiled, *args)
        ref_loss, ref_grads = _loss_and_grads(_model, *ref)
        assert compiled_backward_used(loss)
        torch.testing.assert_close(loss, ref_loss)
        assert len(grads) == len(ref_grads)
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r)


def test_the_users_backward_is_used_not_a_derivative_of_the_forward():
    x = torch.randn(8, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    fn = torchlite.compile(lambda x, w: _RoundSTE.apply(x, w, 1.0, {"gain": 1.0}).sum())
    fn(x, w).backward()
    # NOTE: round's own derivative is zero; the straight-through backward passes w and x.
    torch.testing.assert_close(x.grad, w.detach())
    torch.testing.assert_close(w.grad, x.detach())


class _Counted(torch.autograd.Function):
    calls = 0

    @staticmethod
    def forward(ctx, x):
        _Counted.calls += 1  # NOTE: a Python effect of the user's forward, made per call
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x


def test_a_function_run_op_by_op_records_the_users_function():
    # NOTE: the op-by-op path (no compiled backward): the node calls Fn.apply, so autograd
    # records the user's Function and its forward runs on every call (capture also ran it
    # once on meta tensors).
    fn = torchlite.compile(
        lambda x: _Counted.apply(x.exp()).sum(), options={"compiled_backward": False}
    )
    fn(torch.randn(5, requires_grad=True)).backward()
    x = torch.randn(5, requires_grad=True)
    ref = x.detach().requires_grad_()
    before = _Counted.calls
    fn(x).backward()
    fn(x.detach().requires_grad_())
    assert _Counted.calls - before == 2
    _Counted.apply(ref.exp()).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad)


class _ReadsValue(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * float(x.max())  # NOTE: a value the meta run cannot know

    @staticmethod
    def backward(ctx, grad):
        return grad


class _ReturnsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


@pytest.mark.parametrize("fn_cls", [_ReadsValue, _ReturnsInput], ids=["reads_value", "input"])
def test_a_function_a_graph_node_cannot_stand_for_breaks_and_trains_as_eager(fn_cls):
    def f(x):
        return fn_cls.apply(x * 3).sum()

    x = torch.randn(4, requires_grad=True)
    ref = x.detach().requires_grad_()
    report = torchlite.explain(f)(x.detach().requires_grad_())
    assert report.breaks_by_kind.get("autograd_function") == 1, report.break_reasons
    torchlite.compile(f)(x).backward()
    f(ref).backward()
    torch.testing.assert_close(x.grad, ref.grad)


class _ValueInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * float(x.abs().max())  # NOTE: a value the joint trace cannot know


def test_a_backward_the_joint_trace_cannot_run_trains_op_by_op_as_eager():
    # NOTE: one graph still; its backward runs through torch's autograd (the user's Function
    # recorded by the node's apply) instead of a compiled backward.
    def f(x):
        return _ValueInBackward.apply(x.sin()).sum()

    x = torch.randn(6, requires_grad=True)
    ref = x.detach().requires_grad_()
    report = torchlite.explain(f)(x.detach().requires_grad_())
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    out = torchlite.compile(f)(x)
    out.backward()
    f(ref).backward()
    assert not compiled_backward_used(out)
    torch.testing.assert_close(x.grad, ref.grad)


def test_a_function_under_autocast_breaks_and_trains_as_eager():
    # NOTE: eager's autocast casts inside the user's forward; the joint trace runs without
    # autocast, so such a call stays eager.
    def f(x, w):
        return _RoundSTE.apply(x @ w, w.sum(0), 1.0, {"gain": 2.0}).float().sum()

    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    ref = w.detach().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        report = torchlite.explain(f)(x, w.detach().requires_grad_())
        torchlite.compile(f)(x, w).backward()
        f(x, ref).backward()
    assert report.breaks_by_kind.get("autograd_function") == 1, report.break_reasons
    torch.testing.assert_close(w.grad, ref.grad)


_GAIN = 2.0
_TABLE = torch.tensor([1.0, 3.0])


class _ScaledByGlobal(torch.autograd.Function):
    """forward and backward read a module global number: a compiled graph must not keep the
    value it had when traced."""

    @staticmethod
    def forward(ctx, x):
        return x * _GAIN

    @staticmethod
    def backward(ctx, grad):
        return grad * _GAIN * 3.0  # NOTE: 3x: the user's backward, not the derivative


class _ReadsGlobalTensor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * _TABLE[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * _TABLE[0]


def test_a_global_number_the_function_reads_is_guarded(monkeypatch):
    def f(x):
        return _ScaledByGlobal.apply(x.cos()).sum()

    compiled = torchlite.compile(f)
    for gain in (2.0, 5.0, 5.0, -1.5):
        monkeypatch.setitem(globals(), "_GAIN", gain)
        x = torch.randn(5, requires_grad=True)
        ref = x.detach().requires_grad_()
        out, want = compiled(x), f(ref)
        out.backward()
        want.backward()
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(x.grad, ref.grad)
        assert compiled_backward_used(out)


def test_a_global_tensor_the_function_reads_breaks_and_trains_as_eager(monkeypatch):
    def f(x):
        return _ReadsGlobalTensor.apply(x.sin()).sum()

    x = torch.randn(4, requires_grad=True)
    report = torchlite.explain(f)(x.detach().requires_grad_())
    assert report.breaks_by_kind.get("autograd_function") == 1, report.break_reasons
    assert "_TABLE" in str(report.break_reasons)
    compiled = torchlite.compile(f)
    for table in (torch.tensor([1.0, 3.0]), torch.tensor([-2.0, 0.5])):
        monkeypatch.setitem(globals(), "_TABLE", table)
        x = torch.randn(4, requires_grad=True)
        ref = x.detach().requires_grad_()
        compiled(x).backward()
        f(ref).backward()
        torch.testing.assert_close(x.grad, ref.grad)
