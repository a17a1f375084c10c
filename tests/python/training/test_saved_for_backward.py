"""What a training forward saves for backward: no more bytes than AOTAutograd's min-cut
partitioner saves for the same transformer block (dropout on), and the gradients eager's.

NOTE: CPU dropout is `x * (empty_like(x).bernoulli_(1 - p) / (1 - p))`; saved as is, its scaled
mask costs x's itemsize an element where AOTAutograd saves a bool mask and recomputes the rest.
"""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from train_check import compiled_backward_used

import torchlite
from torchlite import _C, _training


class _Block(nn.Module):
    """A pre-LN GPT block with the math attention path: dropout on the attention probabilities,
    after the projection and after the MLP (as HF GPT-2's eager attention)."""

    def __init__(self, dim=32, heads=4, p=0.1):
        super().__init__()
        self.heads, self.p = heads, p
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / (c // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        probs = F.dropout(probs, self.p, self.training)
        h = (probs @ v).transpose(1, 2).reshape(b, t, c)
        x = x + F.dropout(self.proj(h), self.p, self.training)
        m = self.down(F.gelu(self.up(self.ln2(x))))
        return x + F.dropout(m, self.p, self.training)


def _bytes(dtype, shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n * dtype.itemsize


def _torchlite_saved(fn, *args):
    """(name, target, dtype, shape) of each value torchlite's partition saves for backward."""
    torchlite.reset()
    with _training.recording_joint_traces() as graphs:
        out = torchlite.compile(fn)(*args)
    assert compiled_backward_used(out)
    (joint,) = graphs
    _, _, saved, _ = _C.partition_joint(
        joint.graph, joint.num_primals, joint.num_forward_outputs, True
    )
    nodes = {n["name"]: n for n in joint.graph.nodes()}
    return [
        (s, nodes[s]["target"], nodes[s]["meta"]["dtype"], tuple(nodes[s]["meta"]["shape"]))
        for s in saved
    ], nodes


def _aot_saved_bytes(fn, *args) -> int:
    """The bytes AOTAutograd's min-cut partitioner (inductor's decompositions) saves for the
    backward of fn(*args)."""
    rows = _training.aot_autograd_saved(
        lambda backend: torch.compile(fn, backend=backend)(*args).sum().backward()
    )
    assert rows, "AOTAutograd made no backward"
    return sum(r[3] for r in rows)


@pytest.mark.skipif(not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op")
def _assert_backward_matches(out_c, out_e, xc, xe, g, eager, compiled_module):
    """The compiled backward ran and its output, input and parameter gradients equal eager's
    (clears the parameters' .grad for the next shape)."""
    assert compiled_backward_used(out_c)
    torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-5)
    out_c.backward(g)
    out_e.backward(g)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-4, atol=1e-5)
    for (name, pe), pc in zip(eager.named_parameters(), compiled_module.parameters(), strict=True):
        torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=name)
        pe.grad = pc.grad = None


def test_block_saves_no_more_than_aotautograd_and_dropout_masks_as_bool():
    torch.manual_seed(0)
    block = _Block().train()
    x = torch.randn(2, 16, 32, requires_grad=True)
    saved, nodes = _torchlite_saved(block, x)
    total = sum(_bytes(dtype, shape) for _, _, dtype, shape in saved)
    aot = _aot_saved_bytes(block, x)
    # NOTE: AOTAutograd 136_192 bytes (torch 2.13), torchlite 111_616; with float32 masks and
    # the products saved: 148_480, above the bound.
    assert total <= aot + 2048, (total, aot, saved)
    # products of saved values are recomputed (AOTAutograd's min cut does): the dropped
    # attention probabilities beside the softmax and its mask, the gelu's output beside its input
    shapes = [(dtype, shape) for _, _, dtype, shape in saved]
    assert shapes.count((torch.float32, (2, 4, 16, 16))) == 1, saved
    assert (torch.float32, (2, 16, 128)) not in shapes, saved
    draws = [s for s in saved if "bernoulli" in str(s[1])]
    assert len(draws) == 3 and all(dtype == torch.bool for _, _, dtype, _ in draws), draws
    # never a value and its own cast both
    names = {s[0] for s in saved}
    for name, target, _, _ in saved:
        if str(target) in ("to", "aten._to_copy.default"):
            (src,) = [a for a in nodes[name]["args"] if isinstance(a, _C.NodeRef)]
            assert src.name not in names, f"{name} saved beside the value it casts"


def _seeded(fn, seed, *args):
    torch.manual_seed(seed)
    return fn(*args)


@pytest.mark.skipif(not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op")
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_block_gradients_match_eager_seeded_alike(p):
    torch.manual_seed(0)
    eager = _Block(p=p).train()
    compiled_block = _Block(p=p).train()
    compiled_block.load_state_dict(eager.state_dict())
    compiled = torchlite.compile(compiled_block)
    for shape in ((2, 16, 32), (3, 8, 32)):
        x = torch.randn(shape)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        g = torch.randn(shape)
        out_c = _seeded(compiled, 5, xc)
        out_e = _seeded(eager, 5, xe)
        _assert_backward_matches(out_c, out_e, xc, xe, g, eager, compiled_block)


def _draw(x, w):
    noise = torch.empty_like(x).bernoulli_(0.3)
    return (x * w).sin() * noise, torch.empty_like(x).bernoulli_(0.8) * x, torch.bernoulli(x, 0.6)


@pytest.mark.skipif(not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_bernoulli_drawn_as_bool_keeps_eagers_draws_dtype_and_generator(dtype):
    x = torch.randn(64, 33, dtype=dtype)
    w = torch.randn(64, 33, dtype=dtype, requires_grad=True)
    we = w.detach().clone().requires_grad_()
    compiled = torchlite.compile(_draw)
    out_c = _seeded(compiled, 11, x, w)
    after_c = torch.rand(4)
    out_e = _seeded(_draw, 11, x, we)
    after_e = torch.rand(4)
    assert compiled_backward_used(out_c[0])
    assert torch.equal(after_c, after_e)  # the generator advanced alike
    for c, e in zip(out_c, out_e, strict=True):
        assert c.dtype == e.dtype == dtype
        assert torch.equal(c != 0, e != 0)  # the same draws
        torch.testing.assert_close(c, e)
    keep = (out_c[1] != 0).float().mean().item()
    assert 0.7 < keep < 0.9
    (out_c[0] * 2).sum().backward()
    (out_e[0] * 2).sum().backward()
    torch.testing.assert_close(w.grad, we.grad)


class _ResidualStack(nn.Module):
    """Pre-LN residual blocks (a ViT's): x + proj(ln(x)), then x + fc2(gelu(fc1(ln(x))))."""

    def __init__(self, depth, dim=16):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.ModuleList(
                [
                    nn.LayerNorm(dim),
                    nn.Linear(dim, dim),
                    nn.LayerNorm(dim),
                    nn.Linear(dim, 2 * dim),
                    nn.Linear(2 * dim, dim),
                ]
            )
            for _ in range(depth)
        )

    def forward(self, x):
        for ln1, proj, ln2, fc1, fc2 in self.blocks:
            x = x + proj(ln1(x))
            x = x + fc2(F.gelu(fc1(ln2(x))))
        return x


def _longest_recompute_chain(fn, *args) -> int:
    """The most recomputed values any one recomputed value is made from, through recomputed
    values only: how far back in the forward backward remakes values before it needs them."""
    torchlite.reset()
    with _training.recording_joint_traces() as graphs:
        assert compiled_backward_used(torchlite.compile(fn)(*args))
    (joint,) = graphs
    nodes = {n["name"]: n for n in joint.graph.nodes()}
    _, _, _, recomputed = _C.partition_joint(
        joint.graph, joint.num_primals, joint.num_forward_outputs, True
    )
    recomputed = set(recomputed)
    behind: dict[str, set] = {}

    def ancestors(name):
        if name not in behind:
            found = set()
            for a in nodes[name]["args"]:
                for ref in a if isinstance(a, (list, tuple)) else [a]:
                    if isinstance(ref, _C.NodeRef) and ref.name in recomputed:
                        found |= {ref.name} | ancestors(ref.name)
            behind[name] = found
        return behind[name]

    return max((len(ancestors(n)) for n in recomputed), default=0)


@pytest.mark.skipif(not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op")
@pytest.mark.parametrize("autocast", [False, True])
def test_recomputation_does_not_chain_through_every_block(autocast):
    # NOTE: each residual sum was recomputed from the one before it (the sum is cheap, its
    # matmul operand stored anyway): backward began by remaking every block's residual stream
    # in one kernel (timm ViT-B/16: 25 float32 outputs of [B, 197, 768] from 24 inputs, all
    # live until their block's backward; its NVRTC compile grew with the depth). How far back
    # a recomputation reaches must not grow with the number of blocks.
    chains = []
    for depth in (3, 6):
        torch.manual_seed(0)
        stack = _ResidualStack(depth).train()
        x = torch.randn(2, 5, 16, requires_grad=True)
        ctx = torch.autocast("cpu", torch.bfloat16) if autocast else contextlib.nullcontext()
        with ctx:
            chains.append(_longest_recompute_chain(stack, x))
    assert chains[1] == chains[0], chains


@pytest.mark.skipif(not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op")
def test_residual_stack_gradients_match_eager():
    torch.manual_seed(0)
    eager = _ResidualStack(4).train()
    compiled_stack = _ResidualStack(4).train()
    compiled_stack.load_state_dict(eager.state_dict())
    compiled = torchlite.compile(compiled_stack)
    for shape in ((2, 5, 16), (3, 7, 16)):
        x = torch.randn(shape)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        g = torch.randn(shape)
        out_c, out_e = compiled(xc), eager(xe)
        _assert_backward_matches(out_c, out_e, xc, xe, g, eager, compiled_stack)
