"""Matrix products with sizes that are not multiples of 8 run on zero-padded operands
(passes/pad_matmuls.cpp): the forward and backward halves of a training step both get it
(the joint trace records linears and their gradients as torch.mm / torch.addmm), and the
values and gradients stay eager's. `pad_matmuls=True` forces the rewrite on any device, so
the CPU shows it; by default only CUDA half-precision products where it pays are padded."""

import re

import pytest
import torch
import torch.nn.functional as F
from train_check import compiled_backward_used

import torchlite
from torchlite import config

needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def _lm_head(x, w):  # GPT-2's tied head: logits, then a loss over them
    logits = x @ w.t()
    return logits, F.cross_entropy(
        logits.float().flatten(0, 1),
        torch.zeros(logits.shape[0] * logits.shape[1], dtype=torch.long),
    )


def _linear_bias(x, w, b):
    return torch.tanh(F.linear(x, w, b)) * 2


def _odd_inner(x, w):  # the inner size (13) is the unaligned one
    return (x @ w).relu()


def _returned_product(x, w):  # the narrowed product is a graph output itself
    return x @ w, (x @ w).sum()


def _transposed_output(x, w):  # a non-contiguous output: copied back into its traced layout
    return (x @ w).t()


CASES = {
    "lm_head": (_lm_head, lambda: [torch.randn(2, 5, 16), torch.randn(37, 16)]),
    "linear_bias": (
        _linear_bias,
        lambda: [torch.randn(9, 24), torch.randn(19, 24), torch.randn(19)],
    ),
    "odd_inner": (_odd_inner, lambda: [torch.randn(16, 13), torch.randn(13, 24)]),
    "odd_everything": (_odd_inner, lambda: [torch.randn(11, 13), torch.randn(13, 21)]),
    "returned_product": (_returned_product, lambda: [torch.randn(6, 8), torch.randn(8, 11)]),
    "transposed_output": (_transposed_output, lambda: [torch.randn(6, 8), torch.randn(8, 11)]),
}


def _outputs(res):
    return list(res) if isinstance(res, tuple) else [res]


def _close(got, expect, rel):
    if rel is None:
        torch.testing.assert_close(got, expect)
    else:  # NOTE: half precision: the padded and unpadded cuBLAS kernels round differently
        scale = expect.float().abs().max().item()
        torch.testing.assert_close(got.float(), expect.float(), rtol=rel, atol=rel * scale)


def _check_training(fn, make, options, device="cpu", dtype=torch.float32, rel=None):
    torch.manual_seed(0)
    args = [a.to(device, dtype) for a in make()]
    eager_args = [a.clone().requires_grad_() for a in args]
    comp_args = [a.clone().requires_grad_() for a in args]
    expect = _outputs(fn(*eager_args))
    torchlite.reset()
    got = _outputs(torchlite.compile(fn, options=options)(*comp_args))
    assert compiled_backward_used(got[0])
    for e, g in zip(expect, got, strict=True):
        _close(g, e, rel)
        assert g.stride() == e.stride()  # NOTE: outputs are copied back into eager's layout
    seeds = [torch.randn_like(e) for e in expect]
    torch.autograd.backward(expect, seeds)
    torch.autograd.backward(got, seeds)
    for e, g in zip(eager_args, comp_args, strict=True):
        _close(g.grad, e.grad, rel)
    return got


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("pad", [True, None])
def test_padded_products_give_eager_values_and_gradients(name, pad):
    fn, make = CASES[name]
    _check_training(fn, make, {"pad_matmuls": pad})


def _pass_dumps(tmp_path, monkeypatch, fn, make, options):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    torchlite.reset_counters()
    _check_training(fn, make, options)
    dumps = {}
    for half in ("forward", "backward"):
        (f,) = tmp_path.glob(f"run-*/*/{half}/*_torchlite.pad_matmuls.txt")
        dumps[half] = f.read_text()
    return dumps


def _padded_shapes(dump):
    return sorted(re.findall(r"%\S+ : (\S+) = torch\.constant_pad_nd", dump))


@needs_cpu_kernels
def test_forced_padding_pads_forward_and_both_gradients(tmp_path, monkeypatch):
    fn, make = CASES["lm_head"]
    dumps = _pass_dumps(tmp_path, monkeypatch, fn, make, {"pad_matmuls": True})
    # forward: only the head's weight (37 rows, padded through the transpose): x's 10 rows are
    # no contiguous width of a row-major operand
    assert _padded_shapes(dumps["forward"]) == ["f32[40,16]"], dumps["forward"]
    assert "narrow" in dumps["forward"]
    # backward: the logits' gradient padded once for both products (K of grad_x; M of grad_w,
    # whose `a` is its transpose) and the weight for grad_x's K
    assert _padded_shapes(dumps["backward"]) == ["f32[10,40]", "f32[40,16]"], dumps["backward"]
    assert torchlite.counters()["matmuls_padded"] == 3


@needs_cpu_kernels
def test_unaligned_row_count_alone_is_left_alone(tmp_path, monkeypatch):
    # 10 rows of a row-major x are no width cuBLAS aligns: nothing to pad, forward or backward
    dumps = _pass_dumps(
        tmp_path,
        monkeypatch,
        _odd_inner,
        lambda: [torch.randn(10, 16), torch.randn(16, 24)],
        {"pad_matmuls": True},
    )
    assert "constant_pad_nd" not in dumps["forward"] + dumps["backward"]
    assert torchlite.counters()["matmuls_padded"] == 0


@needs_cpu_kernels
@pytest.mark.parametrize("pad", [None, False])
def test_cpu_float_products_are_not_padded_unless_forced(tmp_path, monkeypatch, pad):
    fn, make = CASES["lm_head"]
    dumps = _pass_dumps(tmp_path, monkeypatch, fn, make, {"pad_matmuls": pad})
    assert "constant_pad_nd" not in dumps["forward"] + dumps["backward"]
    assert torchlite.counters()["matmuls_padded"] == 0


@needs_cpu_kernels
def test_returned_non_contiguous_output_keeps_its_traced_layout(tmp_path, monkeypatch):
    fn, make = CASES["transposed_output"]
    dumps = _pass_dumps(tmp_path, monkeypatch, fn, make, {"pad_matmuls": True})
    assert "contiguous" in dumps["forward"], dumps["forward"]


# --- CUDA: the default decision ----------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_vocabulary_head_is_padded_by_default_and_matches_eager():
    def head(x, w):
        logits = x @ w.t()
        return F.cross_entropy(
            logits.float().flatten(0, 1),
            torch.arange(logits.shape[0] * logits.shape[1], device=x.device) % w.shape[0],
        )

    torchlite.reset_counters()
    _check_training(
        head,
        lambda: [torch.randn(8, 256, 768), torch.randn(10007, 768) * 0.05],
        {},
        device="cuda",
        dtype=torch.bfloat16,
        rel=3e-2,
    )
    assert torchlite.counters()["matmuls_padded"] == 3  # forward, grad of x, grad of w


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_small_product_is_not_padded():
    torchlite.reset_counters()
    _check_training(
        lambda x, w: (x @ w.t()).float().square().mean(),
        lambda: [torch.randn(1, 64), torch.randn(1001, 64)],
        {},
        device="cuda",
        dtype=torch.bfloat16,
        rel=3e-2,
    )
    assert torchlite.counters()["matmuls_padded"] == 0
