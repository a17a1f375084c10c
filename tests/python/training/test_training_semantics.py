"""Autograd's semantics hold through the compiled forward and backward: accumulation into
.grad, requires_grad mixes, retain_graph, no_grad regions, detach, in-place ops on leaves,
double backward and the settings that turn the compiled backward off."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from train_check import compiled_backward_used

import torchlite


def _mlp_step(x, w, b):
    return torch.tanh(x @ w + b).square()


def _leaves(*shapes, requires_grad=True):
    return [torch.randn(s, requires_grad=requires_grad) for s in shapes]


def _clones(ts):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in ts]


def test_gradients_accumulate_into_grad_across_two_backwards():
    args = _leaves((4, 3), (3, 5), (5,))
    ref = _clones(args)
    compiled = torchlite.compile(_mlp_step)
    for _ in range(2):
        compiled(*args).sum().backward()
        _mlp_step(*ref).sum().backward()
    assert compiled_backward_used(compiled(*args))
    for a, r in zip(args, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad)


@pytest.mark.parametrize(
    "needs_grad", [(True, False, False), (False, True, True), (False, False, True)]
)
def test_only_inputs_that_require_grad_get_gradients(needs_grad):
    args = [torch.randn(s, requires_grad=g) for s, g in zip([(4, 3), (3, 5), (5,)], needs_grad)]
    ref = _clones(args)
    out = torchlite.compile(_mlp_step)(*args)
    assert compiled_backward_used(out)
    out.sum().backward()
    _mlp_step(*ref).sum().backward()
    for a, r in zip(args, ref, strict=True):
        assert (a.grad is None) == (r.grad is None)
        if r.grad is not None:
            torch.testing.assert_close(a.grad, r.grad)


def test_retain_graph_allows_a_second_backward_and_its_absence_raises_like_eager():
    args = _leaves((4, 3), (3, 5), (5,))
    out = torchlite.compile(_mlp_step)(*args)
    loss = out.sum()
    loss.backward(retain_graph=True)
    first = args[1].grad.clone()
    loss.backward()
    torch.testing.assert_close(args[1].grad, 2 * first)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def _with_no_grad_region(x, w):
    y = x * w
    with torch.no_grad():
        scale = y.abs().amax() + 1
    return (y / scale).sin(), scale


def test_no_grad_region_inside_the_forward_stops_gradients_like_eager():
    args = _leaves((3, 4), (4,))
    ref = _clones(args)
    out, scale = torchlite.compile(_with_no_grad_region)(*args)
    out_e, scale_e = _with_no_grad_region(*ref)
    assert not scale.requires_grad and compiled_backward_used(out)
    torch.testing.assert_close(scale, scale_e)
    out.sum().backward()
    out_e.sum().backward()
    for a, r in zip(args, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad)


def _detached_branch(x, w):
    y = x * w
    return y.detach() * y + y.exp()


def test_detach_cuts_the_gradient_like_eager():
    args = _leaves((5,), (5,))
    ref = _clones(args)
    out = torchlite.compile(_detached_branch)(*args)
    assert compiled_backward_used(out)
    out.sum().backward()
    _detached_branch(*ref).sum().backward()
    for a, r in zip(args, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad)


def _in_place_on_leaf(w):
    w.add_(1)
    return w * 2


def test_in_place_on_a_leaf_that_requires_grad_raises_eagers_error():
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError) as eager_error:
        _in_place_on_leaf(w)
    with pytest.raises(RuntimeError) as compiled_error:
        torchlite.compile(_in_place_on_leaf)(w)
    assert str(compiled_error.value) == str(eager_error.value)


def test_double_backward_raises_a_clear_error_instead_of_a_wrong_derivative():
    x = torch.randn(4, requires_grad=True)
    out = torchlite.compile(lambda x: (x * x).sin())(x)
    assert compiled_backward_used(out)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="second derivative through a compiled graph"):
        g.sum().backward()


def test_first_derivative_under_create_graph_is_still_right():
    x = torch.randn(4, requires_grad=True)
    out = torchlite.compile(lambda x: (x * x).sin())(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    torch.testing.assert_close(g, 2 * x * (x * x).cos())


def test_output_hooks_see_the_gradient():
    x = torch.randn(3, requires_grad=True)
    out = torchlite.compile(lambda x: x.exp() * 2)(x)
    seen = []
    out.register_hook(lambda g: seen.append(g.clone()))
    out.backward(torch.ones(3))
    torch.testing.assert_close(seen[0], torch.ones(3))
    torch.testing.assert_close(x.grad, 2 * x.detach().exp())


def test_integer_outputs_are_not_differentiable():
    x = torch.randn(3, 4, requires_grad=True)
    out, idx = torchlite.compile(lambda x: ((x * 2).relu(), (x * 2).argmax(-1)))(x)
    assert compiled_backward_used(out) and not idx.requires_grad
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2.0 * (x.detach() > 0))


class _BatchNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x)).relu()


def test_batch_norm_running_stats_are_updated_in_train_mode():
    m = _BatchNormNet()
    ref = _BatchNormNet()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 6, 6)
    out = torchlite.compile(m)(x)
    assert compiled_backward_used(out)
    torch.testing.assert_close(out, ref(x))
    torch.testing.assert_close(m.bn.running_mean, ref.bn.running_mean)
    torch.testing.assert_close(m.bn.running_var, ref.bn.running_var)
    assert m.bn.num_batches_tracked.item() == ref.bn.num_batches_tracked.item() == 1


def test_compiled_backward_off_runs_op_by_op_with_the_same_gradients():
    args = _leaves((4, 3), (3, 5), (5,))
    ref = _clones(args)
    out = torchlite.compile(_mlp_step, options={"compiled_backward": False})(*args)
    assert out.requires_grad and not compiled_backward_used(out)
    out.sum().backward()
    _mlp_step(*ref).sum().backward()
    for a, r in zip(args, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad)


def test_torch_compile_with_the_torchlite_backend_trains_too():
    import torch._dynamo

    torch._dynamo.reset()
    args = _leaves((4, 3), (3, 5), (5,))
    ref = _clones(args)
    out = torch.compile(_mlp_step, backend="torchlite")(*args)
    out.sum().backward()
    _mlp_step(*ref).sum().backward()
    for a, r in zip(args, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad)


def test_a_second_derivative_mixed_with_first_order_terms_still_raises():
    x = torch.randn(4, requires_grad=True)
    out = torchlite.compile(lambda x: (x * x).sin())(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="second derivative through a compiled graph"):
        (g * x).sum().backward()


def _two_outputs(x, w):
    y = x @ w
    return y.t(), (y * 2).sum(0), y.argmax(1)


def test_non_contiguous_gradients_and_mixed_outputs_match_eager():
    # NOTE: the link skips work per call where it can (contiguous tangents, outputs that are
    # all differentiable, gradients in input order); this graph needs each of them.
    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    outs = torchlite.compile(_two_outputs)(x, w)
    ref = _two_outputs(x, w_ref)
    assert compiled_backward_used(outs[0]) and not outs[2].requires_grad
    grads = [torch.randn(4, 5).t(), torch.randn(5)]  # NOTE: the first is not contiguous
    torch.autograd.backward([outs[0], outs[1]], grads)
    torch.autograd.backward([ref[0], ref[1]], grads)
    for o, r in zip(outs, ref, strict=True):
        torch.testing.assert_close(o, r)
    torch.testing.assert_close(w.grad, w_ref.grad)


def test_a_tensor_left_over_from_a_functorch_transform_gives_eagers_result():
    # NOTE: the link calls autograd's C apply directly, without torch's per-input unwrapping
    # of such tensors: they must never reach a compiled training graph.
    leaked = []

    def inner(x):
        leaked.append(x * 1.0)
        return x.sum()

    torch.func.grad(inner)(torch.randn(3))
    w = torch.randn(3, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    out = torchlite.compile(lambda a, w: (a * w).sin().sum())(leaked[0], w)
    ref = (leaked[0] * w_ref).sin().sum()
    out.backward()
    ref.backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w.grad, w_ref.grad)


def test_compiled_training_under_a_functorch_transform_matches_eager():
    w = torch.randn(3, requires_grad=True)

    def f(x):
        return (x * w).sin().sum()

    x = torch.randn(3)
    torch.testing.assert_close(torch.func.grad(torchlite.compile(f))(x), torch.func.grad(f)(x))


def test_two_training_forwards_then_the_first_backward_works_as_in_eager():
    # NOTE: batch norm updates its running stats inside its kernel; eager keeps their version
    # counter, so a graph that saved them stays valid after another forward.
    def run(model):
        x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
        first = model(x)
        model(x + 1)
        first.square().sum().backward()
        return first

    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    eager = copy.deepcopy(block)
    out = run(torchlite.compile(block))
    ref = run(eager)
    assert compiled_backward_used(out)
    torch.testing.assert_close(out, ref)
    for p, r in zip(block.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad)
    torch.testing.assert_close(block[1].running_mean, eager[1].running_mean)


def _loss_after_a_break(x, w):
    y = torch.tanh(x @ w)
    print(end="")  # NOTE: a graph break: the second graph takes y as an input
    loss = y.float().square().mean()
    return loss, y


def test_graph_returning_its_input_itself_keeps_the_compiled_backward():
    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    ex = torchlite.explain(_loss_after_a_break)(x, w)
    assert ex.graph_count == 2
    assert all(t.endswith(": compiled forward and backward") for t in ex.training), ex.training
    assert len(ex.training) == 2
    compiled = torchlite.compile(_loss_after_a_break)
    for shape in [(4, 3), (6, 3)]:
        x = torch.randn(shape)
        w_ref = w.detach().clone().requires_grad_()
        w.grad = None
        loss, y = compiled(x, w)
        ref_loss, ref_y = _loss_after_a_break(x, w_ref)
        assert compiled_backward_used(loss)
        torch.testing.assert_close(loss, ref_loss)
        torch.testing.assert_close(y, ref_y)
        (loss + y.sum()).backward()
        (ref_loss + ref_y.sum()).backward()
        torch.testing.assert_close(w.grad, w_ref.grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_nll_loss_gradient_matches_eager(reduction, weighted, ignore_index):
    # NOTE: the compiled backward builds nll_loss's gradient pointwise (class index compared
    # with each column) instead of torch._decomp's zero fill and scatter.
    def fn(logits, target, weight):
        loss = F.cross_entropy(
            logits.float() * 2,
            target,
            weight=weight,
            reduction=reduction,
            ignore_index=ignore_index,
        )
        return loss if reduction != "none" else loss.square().sum()

    compiled = torchlite.compile(fn)
    for n, c in [(6, 5), (9, 7)]:
        logits = torch.randn(n, c, requires_grad=True)
        target = torch.randint(0, c, (n,))
        target[0] = ignore_index if ignore_index >= 0 else -100
        weight = torch.rand(c) if weighted else None
        ref = logits.detach().clone().requires_grad_()
        out, expected = compiled(logits, target, weight), fn(ref, target, weight)
        assert compiled_backward_used(out)
        torch.testing.assert_close(out, expected)
        out.backward()
        expected.backward()
        torch.testing.assert_close(logits.grad, ref.grad)
