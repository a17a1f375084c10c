"""TORCHLITE_TRACE for training graphs: the joint graph, what the partitioner saved and
recomputed, and the forward and backward halves each through the compile pipeline with their
kernels; and partition_joint's split itself."""

import pytest
import torch
from train_check import compiled_backward_used

import torchlite
from torchlite import _C, config

needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def _block(x, w, b):
    return torch.relu(x @ w + b).sigmoid() * 2


@needs_cpu_kernels
def test_trace_dumps_joint_partition_and_both_halves_with_kernels(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    args = [torch.randn(4, 3, requires_grad=True), torch.randn(3, 5), torch.randn(5)]
    args[1].requires_grad_()
    out = torchlite.compile(_block)(*args)
    assert compiled_backward_used(out)
    out.sum().backward()
    (pipeline,) = tmp_path.glob("run-*/*/pipeline.txt")
    folder = pipeline.parent
    assert "training: compiled forward and backward" in pipeline.read_text()
    joint = (folder / "joint.txt").read_text()
    assert "tangent_0" in joint and "torch.mm" in joint
    partition = (folder / "partition.txt").read_text()
    assert partition.startswith("saved for backward: ")
    assert "recomputed in backward: " in partition
    assert "\nforward:\n" in partition and "\nbackward:\n" in partition
    for half in ("forward", "backward"):
        assert "kernel " in (folder / half / "lowered.txt").read_text(), half


def test_trace_says_why_a_graph_runs_op_by_op(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    x = torch.randn(3, requires_grad=True)
    out = torchlite.compile(_block, options={"compiled_backward": False})(x, torch.randn(3, 3), x)
    assert not compiled_backward_used(out)
    (pipeline,) = tmp_path.glob("run-*/*/pipeline.txt")
    assert "training: op by op (compiled_backward is off)" in pipeline.read_text()


def _joint_of(fn, *args):
    """The joint trace of `fn` through the same tracer compile_graph uses."""
    from torchlite import _training

    torchlite.reset()
    with _training.recording_joint_traces() as graphs:
        torchlite.compile(fn)(*args)
    (joint,) = graphs
    return joint


def test_partition_saves_the_matmul_result_and_recomputes_the_relu():
    args = [torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)]
    joint = _joint_of(lambda x, w: torch.relu(x @ w) @ w.t(), *args)
    fwd, bwd, saved, recomputed = _C.partition_joint(joint.graph, joint.num_primals, 1, True)
    assert any(n.startswith("mm") for n in saved)
    assert any(n.startswith("relu") for n in recomputed)
    assert not any(n.startswith("relu") for n in saved)
    _, _, saved_all, recomputed_none = _C.partition_joint(joint.graph, joint.num_primals, 1, False)
    assert recomputed_none == [] and any(n.startswith("relu") for n in saved_all)
    assert "tangent" not in str(fwd)
    assert "tangent_0" in str(bwd)


@pytest.mark.parametrize("recompute", [True, False])
def test_both_partitions_give_eagers_gradients(recompute):
    args = [torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)]
    ref = [a.detach().clone().requires_grad_() for a in args]

    def fn(x, w):
        return (torch.relu(x @ w).exp() @ w.t()).tanh()

    torchlite.reset()
    out = torchlite.compile(fn, options={"recompute_in_backward": recompute})(*args)
    assert compiled_backward_used(out)
    out.sum().backward()
    fn(*ref).sum().backward()
    for a, r in zip(args, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad)


def _embed(ids, w, padding_idx):
    return torch.nn.functional.embedding(ids, w, padding_idx=padding_idx).sin() * 3


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_embedding_backward_stays_torchs_op_and_gives_eagers_gradient(padding_idx):
    # NOTE: few rows, many ids: repeated indices are what the index_put decomposition serialized.
    ids = torch.randint(0, 3, (4, 9))
    w = torch.randn(5, 6, requires_grad=True)
    ref = w.detach().clone().requires_grad_()
    joint = _joint_of(_embed, ids, w, padding_idx)
    text = str(joint.graph)
    assert "embedding_dense_backward" in text and "index_put" not in text, text
    torchlite.reset()
    out = torchlite.compile(_embed)(ids, w, padding_idx)
    expected = _embed(ids, ref, padding_idx)
    assert compiled_backward_used(out)
    torch.testing.assert_close(out, expected)
    g = torch.randn_like(out)
    out.backward(g)
    expected.backward(g)
    torch.testing.assert_close(w.grad, ref.grad)


def _swiglu(x, wg, wu, wd):
    return (torch.nn.functional.silu(x @ wg) * (x @ wu)) @ wd


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_partition_saves_the_gate_and_up_and_recomputes_the_silu_and_product(dtype):
    """Backward needs the gate and up projections (the silu's and the product's derivatives):
    the down projection's input (silu(gate) * up) is a product of those two, recomputed from
    them as AOTAutograd's min cut does, not held from the forward to backward beside them. The
    silu is recomputed from the saved gate, through its casts and sigmoid (a chain: saving its
    float32 product alone would store more); nothing the forward does not store anyway is
    saved (the silu output alone would be)."""
    args = [torch.randn(4, 8, dtype=dtype, requires_grad=True)]
    args += [torch.randn(s, dtype=dtype, requires_grad=True) for s in ((8, 6), (8, 6), (6, 8))]
    joint = _joint_of(_swiglu, *args)
    _, _, saved, recomputed = _C.partition_joint(joint.graph, joint.num_primals, 1, True)
    assert sorted(n for n in saved if not n.startswith("primal")) == ["mm", "mm_1"]
    assert "sigmoid" in recomputed and "mul_1" in recomputed


def test_partition_saves_the_product_a_matmul_reads_with_matmul_input_recompute_off():
    """recompute_matmul_inputs off: the product the down projection reads, which the forward
    stores anyway, is saved (no backward kernel recomputes it)."""
    args = [torch.randn(4, 8, requires_grad=True)]
    args += [torch.randn(s, requires_grad=True) for s in ((8, 6), (8, 6), (6, 8))]
    joint = _joint_of(_swiglu, *args)
    _, _, saved, recomputed = _C.partition_joint(joint.graph, joint.num_primals, 1, True, False)
    assert sorted(n for n in saved if not n.startswith("primal")) == ["mm", "mm_1", "mul_1"]
    assert "sigmoid" in recomputed and "mul_1" not in recomputed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_gradients_match_eager(dtype):
    args = [torch.randn(4, 8, dtype=dtype)] + [
        torch.randn(s, dtype=dtype) for s in ((8, 6), (8, 6), (6, 8))
    ]

    def grads(fn):
        leaves = [a.clone().requires_grad_() for a in args]
        out = fn(*leaves)
        return [out, *torch.autograd.grad(out.float().square().sum(), leaves)]

    torchlite.reset()
    # NOTE: float32 allows matmul summation-order rounding (1e-5 relative): the GPU
    # machine's CPU graphs (no LLVM there) differed from eager by 4.7e-6.
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
    for got, want in zip(grads(torchlite.compile(_swiglu)), grads(_swiglu), strict=True):
        torch.testing.assert_close(got, want, **tol)


def _cross_entropy_of_half_logits(x, w, t):
    logits = x @ w
    return torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), t)


def _half_logits_args():
    return [
        torch.randn(2, 3, 8, dtype=torch.bfloat16, requires_grad=True),
        torch.randn(8, 12, dtype=torch.bfloat16, requires_grad=True),
        torch.randint(0, 12, (6,)),
    ]


def test_partition_leaves_the_float_log_softmax_of_half_logits_to_backward():
    # NOTE: saved, the float32 log_softmax of bf16 logits stores twice the logits' bytes (GPT-2
    # 8x512 with labels: 822 MB, peak memory above eager's); made in the forward for the loss
    # (an extern nll_loss_forward reading all of it), it was as large a transient there. The
    # loss is the logsumexp minus the target's logit, read from the logits themselves, and only
    # backward makes the log_softmax, from the product the forward stores anyway.
    joint = _joint_of(_cross_entropy_of_half_logits, *_half_logits_args())
    fwd, _, saved, _ = _C.partition_joint(joint.graph, joint.num_primals, 1, True)
    assert not any(n.startswith("log_softmax") for n in saved), saved
    assert any(n.startswith(("mm", "bmm", "matmul")) for n in saved), saved
    assert "log_softmax" not in str(fwd) and "nll_loss_forward" not in str(fwd), str(fwd)


def test_partition_keeps_saving_a_reduction_much_smaller_than_its_input():
    x = torch.randn(6, 16, requires_grad=True)
    joint = _joint_of(lambda x: (x * x.sum(-1, keepdim=True)).tanh(), x)
    _, _, saved, recomputed = _C.partition_joint(joint.graph, joint.num_primals, 1, True)
    assert not any(n.startswith("sum") for n in recomputed), (saved, recomputed)


@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(2, 3, 8), (3, 5, 7)])
def test_recomputed_log_softmax_gives_eagers_gradients_with_its_cast_fused(
    monkeypatch, tmp_path, shape
):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    args = [
        torch.randn(shape, dtype=torch.bfloat16, requires_grad=True),
        torch.randn(shape[-1], 13, dtype=torch.bfloat16, requires_grad=True),
        torch.randint(0, 13, (shape[0] * shape[1],)),
    ]
    ref = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    torchlite.reset()
    out = torchlite.compile(_cross_entropy_of_half_logits)(*args)
    assert compiled_backward_used(out)
    expected = _cross_entropy_of_half_logits(*ref)
    torch.testing.assert_close(out, expected)
    out.backward()
    expected.backward()
    for a, r in zip(args[:2], ref[:2], strict=True):
        torch.testing.assert_close(a.grad, r.grad, atol=2e-2, rtol=2e-2)
    (folder,) = {p.parent for p in tmp_path.glob("run-*/*/partition.txt")}
    lowered = (folder / "backward" / "lowered.txt").read_text().splitlines()
    # one kernel: the log_softmax recomputed from the bf16 logits (its float32 cast and the
    # reshapes around it fused in), its backward and the cast back, none written out between
    assert sum(line.startswith("kernel ") for line in lowered) == 1, lowered


def test_partition_joint_of_no_graph_raises():
    """A joint trace that failed has graph None: partition_joint says so (it crashed)."""
    with pytest.raises(ValueError, match="no joint graph"):
        _C.partition_joint(None, 1, 1)
