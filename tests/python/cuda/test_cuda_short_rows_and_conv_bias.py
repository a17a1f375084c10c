"""Two CUDA schedules against eager. Warp rows shorter than a warp: several rows a warp (a
layer norm over 40 channels takes 8 lanes a row), with row counts that leave a warp's last
rows past the end, per-row and per-element outputs, and argmax. Convolution biases moved out
of the call into the next kernel (`torchlite.conv_bias`): torch's separate bias add is gone,
results equal eager's, for conv1d/2d/3d, transposed, grouped, unbatched and channels-last
convolutions, and where the output feeds another convolution or is returned."""

import pytest
import torch
import torch.nn.functional as F
from helpers import compiled_on_cuda, counters
from torch.profiler import ProfilerActivity, profile

import torchlite

pytestmark = pytest.mark.cuda

BF16 = torch.bfloat16


def _compiled(fn, *args, atol=None, rtol=None):
    return compiled_on_cuda(fn, *args, atol=atol, rtol=rtol)[0]


def _tol(dtype):
    return (2e-2, 2e-2) if dtype == BF16 else (1e-4, 1e-4)


# ---- short warp rows ----


@pytest.mark.parametrize("rows", [4096, 37, 1, 3001])  # 37, 1, 3001: a warp's last rows missing
@pytest.mark.parametrize("width", [24, 40, 56, 96, 200])
@pytest.mark.parametrize("dtype", [BF16, torch.float32])
def test_layer_norm_over_short_rows(rows, width, dtype):
    x = torch.randn(rows, width, device="cuda", dtype=dtype)
    w = torch.randn(width, device="cuda", dtype=dtype)
    b = torch.randn(width, device="cuda", dtype=dtype)
    atol, rtol = _tol(dtype)
    _compiled(lambda x, w, b: F.layer_norm(x, (width,), w, b, 1e-6), x, w, b, atol=atol, rtol=rtol)


@pytest.mark.parametrize("rows", [333, 64])
def test_short_rows_with_per_row_outputs_and_softmax(rows):
    x = torch.randn(rows, 48, device="cuda", dtype=BF16)
    _compiled(
        lambda x: (torch.softmax(x, -1), x.float().sum(-1), x.amax(-1)), x, atol=2e-2, rtol=2e-2
    )


def test_short_rows_argmax_takes_the_first_of_ties():
    x = torch.randint(0, 4, (999, 40), device="cuda").to(BF16)
    _compiled(lambda x: (x.argmax(-1), x.argmin(-1)), x)


def test_layer_norm_over_a_permuted_channels_first_input():
    # ConvNeXt's LayerNorm2d on a channels-first tensor: rows across memory (a tiled schedule).
    def ln2d(x, w, b):
        return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), w, b, 1e-6).permute(0, 3, 1, 2)

    for shape in [(8, 40, 56, 56), (3, 96, 7, 9), (2, 768, 7, 7), (32, 96, 56, 56)]:
        for dtype in (BF16, torch.float32):
            x = torch.randn(*shape, device="cuda", dtype=dtype)
            w = torch.randn(shape[1], device="cuda", dtype=dtype)
            b = torch.randn(shape[1], device="cuda", dtype=dtype)
            atol, rtol = _tol(dtype)
            _compiled(ln2d, x, w, b, atol=atol, rtol=rtol)


def test_patch_embedding_then_layer_norm_matches_eager():
    # Swin's stem: one convolution (no channels-last pass), its bias and a layer norm over
    # the permuted output, in one kernel with its output staged through shared memory.
    w = torch.randn(96, 3, 4, 4, device="cuda", dtype=BF16) * 0.2
    b = torch.randn(96, device="cuda", dtype=BF16)
    lw, lb = torch.randn(96, device="cuda", dtype=BF16), torch.randn(96, device="cuda", dtype=BF16)

    def stem(x):
        y = F.conv2d(x, w, b, stride=4).permute(0, 2, 3, 1)
        return F.layer_norm(y, (96,), lw, lb, 1e-5)

    x = torch.randn(4, 3, 64, 60, device="cuda", dtype=BF16)
    compiled = _compiled(stem, x, atol=5e-2, rtol=5e-2)
    assert _bias_adds(compiled, x) == 0


# ---- convolution bias into the next kernel ----


def _bias_adds(fn, *args):
    """aten::add_ calls (torch's bias add inside a biased convolution) while `fn` runs."""
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
        torch.cuda.synchronize()
    return sum(e.name == "aten::add_" for e in p.events())


def _conv_relu(x, w, b):
    return F.relu(F.conv2d(x, w, b, padding=1))


@pytest.mark.parametrize("dtype", [BF16, torch.float32])
def test_conv_bias_moves_into_the_activation(dtype):
    x = torch.randn(4, 16, 20, 20, device="cuda", dtype=dtype)
    w = torch.randn(32, 16, 3, 3, device="cuda", dtype=dtype) * 0.1
    b = torch.randn(32, device="cuda", dtype=dtype)
    assert _bias_adds(_conv_relu, x, w, b) >= 1  # eager: conv, then add_
    before = counters()["conv_biases_split"]
    compiled = _compiled(
        _conv_relu,
        x,
        w,
        b,
        atol=_tol(dtype)[0],
        rtol=_tol(dtype)[1],
    )
    assert counters()["conv_biases_split"] - before == 1
    assert _bias_adds(compiled, x, w, b) == 0


def test_convnext_block_with_biases_matches_eager():
    dw = torch.nn.Conv2d(40, 40, 7, padding=3, groups=40)
    fc1, fc2 = torch.nn.Conv2d(40, 160, 1), torch.nn.Conv2d(160, 40, 1)
    norm = torch.nn.LayerNorm(40, eps=1e-6)
    torch.nn.ModuleList([dw, fc1, fc2, norm]).cuda().to(BF16)

    def block(x):
        y = dw(x).permute(0, 2, 3, 1)
        y = norm(y).permute(0, 3, 1, 2)
        return x + fc2(F.gelu(fc1(y)))

    x = torch.randn(4, 40, 28, 28, device="cuda", dtype=BF16)
    with torch.no_grad():
        for inp in (x, x.contiguous(memory_format=torch.channels_last)):
            compiled = _compiled(block, inp, atol=5e-2, rtol=5e-2)
            assert _bias_adds(compiled, inp) == 0


def test_conv_outputs_read_by_convolutions_and_returned_keep_their_bias():
    w1 = torch.randn(8, 3, 3, 3, device="cuda") * 0.2
    w2 = torch.randn(8, 8, 1, 1, device="cuda") * 0.2
    b1, b2 = torch.randn(8, device="cuda"), torch.randn(8, device="cuda")

    def chain(x):
        y = F.conv2d(x, w1, b1)
        return y, F.conv2d(y, w2, b2)

    _compiled(chain, torch.randn(2, 3, 12, 12, device="cuda"), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "conv,wshape,xshape,kw",
    [
        (F.conv1d, (6, 4, 3), (2, 4, 17), {}),
        (F.conv3d, (6, 4, 3, 3, 3), (2, 4, 6, 7, 5), {"padding": 1}),
        (F.conv2d, (6, 2, 3, 3), (2, 4, 9, 9), {"groups": 2}),
        (F.conv2d, (6, 4, 3, 3), (4, 9, 9), {}),  # unbatched
        (F.conv_transpose2d, (4, 6, 3, 3), (2, 4, 9, 9), {"stride": 2}),
    ],
)
def test_conv_kinds_with_bias_match_eager(conv, wshape, xshape, kw):
    w = torch.randn(*wshape, device="cuda") * 0.2
    out_channels = wshape[1] * kw.get("groups", 1) if conv is F.conv_transpose2d else wshape[0]
    b = torch.randn(out_channels, device="cuda")
    x = torch.randn(*xshape, device="cuda")
    _compiled(lambda x, w, b: torch.tanh(conv(x, w, b, **kw)) * 2, x, w, b, atol=1e-4, rtol=1e-4)


def test_training_convolutions_keep_their_bias_in_the_call():
    conv = torch.nn.Conv2d(3, 4, 3).cuda()
    x = torch.randn(2, 3, 8, 8, device="cuda")
    torchlite.reset()
    before = counters()["conv_biases_split"]
    out = torchlite.compile(lambda x: conv(x).relu())(x)
    out.sum().backward()
    torch.testing.assert_close(out, conv(x).relu())
    assert counters()["conv_biases_split"] == before
    assert conv.bias.grad is not None
