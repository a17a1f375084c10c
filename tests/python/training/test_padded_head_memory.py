"""What a training forward stores around a padded vocabulary head (passes/pad_matmuls.h): a
causal LM's logits `h @ wte.t()` over a vocabulary that is no multiple of 8 (GPT-2's 50257) come
from a padded product narrowed back, a strided view. The loss's `logits.float()` must still fuse
into the logsumexp that reads it (move_reshapes through the strided view), not be written out in
float32 (GPT-2 8x512: 823 MB at the forward's peak, on CUDA where padding is on by default), and
the logits the caller gets and the ones backward reads are one copy, not two (412 MB more).
`pad_matmuls=True` forces the padding on the CPU, so the CPU shows the same graphs."""

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


def _causal_lm_head(h, w, labels):
    """transformers' causal LM head and loss (ForCausalLMLoss): the logits returned to the
    caller, the loss over float32 logits of shifted labels."""
    logits = F.linear(h, w)
    x = logits.float()
    labels = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    loss = F.cross_entropy(x.view(-1, x.shape[-1]), labels.view(-1), ignore_index=-100)
    return loss, logits


def _transposed_head(h, w, labels):
    """The padded product read transposed before the cast and the flattening reshape: no view
    of the narrowed product has the reshape's sizes, so the reshape stays where it is."""
    logits = F.linear(h.flatten(0, 1), w)
    x = logits.t().float().reshape(-1)
    return (x * x).mean() + labels.float().mean() * 0, logits


def _args(batch, seq, width, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, seq, width, generator=g),
        torch.randn(vocab, width, generator=g) * 0.2,
        torch.randint(0, vocab, (batch, seq), generator=g),
    ]


def _run(fn, args, amp):
    h, w, labels = (a.clone() for a in args)
    h.requires_grad_()
    w.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss, logits = fn(h, w, labels)
    loss.backward()
    return loss, logits, h.grad, w.grad


def _kernel_outputs(lowered: str) -> list[tuple[str, int]]:
    """(dtype, elements) of every output of every kernel in a lowered.txt dump."""
    out = []
    sizes = None
    for line in lowered.splitlines():
        k = re.match(r"kernel \S+?\[([\d,]*)\]", line)
        if k:
            sizes = [int(s) for s in k.group(1).split(",") if s]
            continue
        o = re.match(r"\s+out\d+ : (\w+) strides=\[([\d,]*)\]", line)
        if o and sizes is not None:  # NOTE: a reduction's result has stride 0 on reduced axes
            strides = [int(s) for s in o.group(2).split(",") if s]
            numel = 1
            for size, stride in zip(sizes, strides, strict=True):
                numel *= size if stride else 1
            out.append((o.group(1), numel))
    return out


SHAPES = [
    (2, 16, 24, 37),
    (3, 8, 40, 101),
]  # NOTE: batch x seq != width: logits alone have B*T*V elements


@needs_cpu_kernels
@pytest.mark.parametrize("amp", [True, False], ids=["bf16_autocast", "float32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pad", [True, None])
@pytest.mark.parametrize("head", [_causal_lm_head, _transposed_head], ids=["lm", "transposed"])
def test_padded_head_trains_like_eager(amp, shape, pad, head):
    args = _args(*shape)
    expect = _run(head, args, amp)
    torchlite.reset()
    got = _run(torchlite.compile(head, options={"pad_matmuls": pad}), args, amp)
    assert compiled_backward_used(got[0])
    tol = {"rtol": 2e-2, "atol": 2e-2} if amp else {}
    for g, e in zip(got, expect, strict=True):
        torch.testing.assert_close(g, e, **tol)
    assert got[1].stride() == expect[1].stride()  # the caller's logits: eager's layout


@needs_cpu_kernels
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_padded_head_forward_writes_no_float_logits(tmp_path, monkeypatch, shape):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    batch, seq, _, vocab = shape
    torchlite.reset()
    torchlite.reset_counters()
    fn = torchlite.compile(_causal_lm_head, options={"pad_matmuls": True})
    _run(fn, _args(*shape), True)
    assert torchlite.counters()["matmuls_padded"] >= 1
    (lowered,) = tmp_path.glob("run-*/*/forward/lowered.txt")
    outputs = _kernel_outputs(lowered.read_text())
    logits = batch * seq * vocab
    # NOTE: the float32 cast of the (padded, narrowed) logits fuses into the logsumexp
    assert ("f32", logits) not in outputs, lowered.read_text()


@needs_cpu_kernels
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_returned_and_saved_logits_share_one_copy(tmp_path, monkeypatch, shape):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    batch, seq, _, vocab = shape
    torchlite.reset()
    fn = torchlite.compile(_causal_lm_head, options={"pad_matmuls": True})
    _, logits, _, _ = _run(fn, _args(*shape), True)
    (lowered,) = tmp_path.glob("run-*/*/forward/lowered.txt")
    outputs = _kernel_outputs(lowered.read_text())
    # NOTE: the padded product narrowed back is strided: the caller's logits (eager's layout)
    # and the logits backward reads are one contiguous copy of it, not a copy each
    assert outputs.count(("bf16", batch * seq * vocab)) == 1, lowered.read_text()
    assert logits.is_contiguous() and logits.dtype == torch.bfloat16


@needs_cpu_kernels
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_padded_head_without_grad_matches_eager(shape):
    # NOTE: inference graphs run the same passes: the cast fused through the strided view
    args = _args(*shape)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expect = _causal_lm_head(*args)
        torchlite.reset()
        got = torchlite.compile(_causal_lm_head, options={"pad_matmuls": True})(*args)
    for g, e in zip(got, expect, strict=True):
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)
    assert got[1].stride() == expect[1].stride()
