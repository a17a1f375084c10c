"""The Python half of CUDA graphs for training steps (torchlite/_training.py, _PoolSaved): a
compiled forward replayed from a CUDA graph hands its saved tensors out of the graph pool, and
C++ (CudaGraphPool::keep_valid) calls `on_overwrite()` on the step's holder before a replay
could overwrite them. Checked here on the CPU with a fake forward half that overwrites one
"pool" buffer per call, as a replay does: gradients stay right when two forwards run before one
backward, and a second backward through overwritten tensors raises instead of being wrong."""

import weakref

import pytest
import torch

from torchlite import _training


class FakePoolForward:
    """f(w) = (w * w).sum(), saving w in a pool buffer every call rewrites, like a replay."""

    pool_saved = (0,)

    def __init__(self) -> None:
        self.pool = torch.empty(4)
        self.kept: list[weakref.ref] = []
        self.holders: list = []  # every step's holder, for the tests to look at
        self.replayed = True

    def keep_valid(self, holder) -> None:
        self.kept.append(weakref.ref(holder))
        self.holders.append(holder)

    def __call__(self, w):
        for ref in self.kept:  # what CudaGraphPool::before_replay does
            holder = ref()
            if holder is not None:
                holder.on_overwrite()
        self.kept.clear()
        self.pool.copy_(w)
        return ((w * w).sum(), self.pool)


def fake_backward(saved_w, grad):
    return (2 * saved_w * grad,)


def _step_fn():
    joint = _training.JointTrace(
        num_primals=1, num_outputs=1, differentiable_outputs=[0], grad_inputs=[0]
    )
    forward = FakePoolForward()
    run = _training.make_training_function(joint, forward, fake_backward, ["w"])
    return (lambda w: run(w)[0]), forward


def test_two_forwards_before_one_backward_copy_the_first_steps_saved_tensors_out():
    fn, _ = _step_fn()
    w1, w2 = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    (fn(w1) + 3 * fn(w2)).backward()
    torch.testing.assert_close(w1.grad, 2 * w1.detach())
    torch.testing.assert_close(w2.grad, 6 * w2.detach())


def test_one_backward_per_step_copies_nothing():
    fn, forward = _step_fn()
    for _ in range(3):
        w = torch.randn(4, requires_grad=True)
        fn(w).backward()
        torch.testing.assert_close(w.grad, 2 * w.detach())
    # backward ran before the next replay: marked stale, never cloned
    assert [h.stale for h in forward.holders] == [True, True, False]
    assert all(h.tensors[0] is forward.pool for h in forward.holders)


def test_second_backward_after_a_later_replay_raises():
    fn, _ = _step_fn()
    w = torch.randn(4, requires_grad=True)
    out = fn(w)
    out.backward(retain_graph=True)
    out.backward(retain_graph=True)  # nothing replayed in between: still right
    torch.testing.assert_close(w.grad, 4 * w.detach())
    fn(torch.randn(4, requires_grad=True)).backward()
    with pytest.raises(RuntimeError, match="overwritten"):
        out.backward()


def test_plain_calls_save_as_before():
    fn, forward = _step_fn()
    forward.replayed = False  # warm-up calls, or graphs turned off: fresh tensors
    w = torch.randn(4, requires_grad=True)
    fn(w).backward()
    torch.testing.assert_close(w.grad, 2 * w.detach())
    assert forward.holders == []
