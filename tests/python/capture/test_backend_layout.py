"""Compiled results carry eager's strides where eager's kernel picks the layout by backend
(capture/backend_layout.cpp, torchlite/_backend_layout.py): convolutions run channels-last by
oneDNN, the CPU's group norm, batch norm's suggested format, and everything downstream of them
(pointwise ops, pooling, interpolation, *_like factories). Strides read inside traced code and
branches on `is_contiguous()` see eager's answers too."""

import pytest
import torch
import torch.nn.functional as F
from helpers import check

import torchlite

CL = torch.channels_last


def layout_of(t):
    return (
        t.stride(),
        t.is_contiguous(),
        t.is_contiguous(memory_format=CL),
    )


def assert_same_layouts(fn, *args):
    """Runs `fn` eagerly and compiled: every tensor output has eager's strides, contiguity
    in both memory formats and values; non-tensor outputs (strides read in the trace) match."""
    torchlite.reset()
    with torch.no_grad():
        expected = fn(*args)
        actual = torchlite.compile(fn, fullgraph=True)(*args)
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(e, torch.Tensor):
            assert layout_of(a) == layout_of(e), (i, layout_of(a), layout_of(e))
            torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)
        else:
            assert a == e, (i, a, e)


def image(layout, shape=(2, 4, 10, 10)):
    x = torch.randn(shape)
    if layout == "channels_last":
        return x.to(memory_format=CL)
    if layout == "permuted":  # dense, neither contiguous nor channels-last
        return torch.randn(shape[0], shape[1], shape[3], shape[2]).transpose(2, 3)
    return x


LAYOUTS = ["channels_last", "contiguous", "permuted"]


@pytest.mark.parametrize(
    ("layout", "weight_cl"),
    [("channels_last", False), ("contiguous", True), ("permuted", True), ("contiguous", False)],
)
def test_convolutions_and_their_consumers_keep_eager_strides(layout, weight_cl):
    fmt = CL if weight_cl else torch.contiguous_format
    conv = torch.nn.Conv2d(4, 6, 3, padding=1).to(memory_format=fmt)
    depthwise = torch.nn.Conv2d(4, 4, 3, groups=4, padding="same").to(memory_format=fmt)
    up = torch.nn.ConvTranspose2d(4, 3, 2, stride=2).to(memory_format=fmt)
    strided = torch.nn.Conv2d(4, 5, 1, stride=2, bias=False).to(memory_format=fmt)

    def fn(x):
        y = conv(x)
        a = F.silu(y)
        s = a * torch.sigmoid(a.mean((2, 3), keepdim=True))  # squeeze-excitation
        return (
            y, a, s, y.stride(),
            depthwise(x), up(x), strided(x),
            F.max_pool2d(a, 2), F.avg_pool2d(a, 2), F.adaptive_avg_pool2d(a, 1),
            F.adaptive_avg_pool2d(a, 3), F.adaptive_max_pool2d(a, 2),
            F.interpolate(a, scale_factor=2), F.interpolate(a, size=(7, 7), mode="bilinear"),
            a.clone(), torch.zeros_like(a), torch.ones_like(a) + a, torch.empty_like(a).fill_(1),
            y + 1, torch.cat([y, a], 1), y.relu_(),
        )  # fmt: skip

    assert_same_layouts(fn, image(layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_norms_keep_eager_strides(layout):
    bn = torch.nn.BatchNorm2d(4)
    bn_eval = torch.nn.BatchNorm2d(4).eval()
    w, b = torch.randn(4), torch.randn(4)

    def fn(x):
        g = F.group_norm(x, 2, w, b)
        return bn(x), bn_eval(x), g, g.stride(), F.relu(bn_eval(x) + x), F.instance_norm(x)

    assert_same_layouts(fn, image(layout))


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_traced_code_branching_on_contiguity_after_conv_matches_eager(layout):
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=CL)

    def fn(x):
        y = conv(x)
        if y.is_contiguous():
            y = y * 2
        else:
            y = y - 1
        if y.is_contiguous(memory_format=torch.channels_last):
            return y.flatten(1), y.stride()
        return y.sum(1), y.stride()

    with torch.no_grad():
        check(fn, image(layout, (2, 3, 9, 9)))


def test_resnet_block_outputs_and_gradients_keep_eager_strides():
    cl_block = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
    ).to(memory_format=CL)

    def fn(x):
        h = cl_block(x)
        return h + F.group_norm(h, 4), h.stride()

    x = image("contiguous", (2, 3, 8, 8)).requires_grad_()
    torchlite.reset()
    expected, actual = fn(x), torchlite.compile(fn)(x)
    assert layout_of(actual[0]) == layout_of(expected[0]) and actual[1] == expected[1]
    torch.testing.assert_close(actual[0], expected[0], atol=1e-4, rtol=1e-4)
    (g_eager,) = torch.autograd.grad(expected[0].square().sum(), x)
    (g_comp,) = torch.autograd.grad(actual[0].square().sum(), x)
    assert g_comp.stride() == g_eager.stride()
    torch.testing.assert_close(g_comp, g_eager, atol=1e-3, rtol=1e-3)


def volume(layout, shape=(2, 4, 4, 5, 6)):
    x = torch.randn(shape)
    return x.to(memory_format=torch.channels_last_3d) if layout == "channels_last" else x


def pads_pools_shuffles(x, channel_shuffle=True):
    """Ops whose eager kernel picks the result layout by device (meta answers contiguous)."""
    outs = (
        F.pad(x, (1, 2, 1, 1), mode="reflect"), F.pad(x, (1, 2, 1, 1), mode="replicate"),
        F.pad(x, (1, 1, 2, 0)), F.pad(x, (1, 1, 1, 1), mode="circular"),
        F.pixel_shuffle(x, 2), F.pixel_unshuffle(x, 2), torch.roll(x, 1, 1),
        x.roll((1, 2), (2, 3)), torch.roll(x, 3), F.channel_shuffle(x, 2) if channel_shuffle else x,
        F.max_pool2d(x, 2), F.max_pool2d(x, 3, 2, 1, return_indices=True)[1],
        F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, (2, 3)), F.adaptive_max_pool2d(x, 3),
        F.interpolate(x, scale_factor=2), F.interpolate(x, size=(5, 7), mode="bilinear"),
        F.interpolate(x, scale_factor=2, mode="bicubic"), F.interpolate(x, size=(3, 3), mode="area"),
    )  # fmt: skip
    return outs + tuple(y.stride() for y in outs) + tuple(y.is_contiguous() for y in outs)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pads_pools_shuffles_and_roll_keep_eager_strides(layout):
    # NOTE: reflect/replicate pad, pixel_shuffle, roll and channel_shuffle of a channels-last
    # input are channels-last on the CPU where meta says contiguous.
    assert_same_layouts(pads_pools_shuffles, image(layout, (2, 4, 6, 8)))


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_3d_pads_pools_and_1d_pool_keep_eager_strides(layout):
    def fn(v, s):
        outs = (
            F.pad(v, (1, 1, 1, 1, 1, 1), mode="replicate"), F.pad(v, (1, 1, 1, 1, 1, 1), mode="reflect"),
            F.max_pool3d(v, 2), F.avg_pool3d(v, 2), F.adaptive_avg_pool3d(v, 2),
            F.interpolate(v, scale_factor=2, mode="trilinear"), F.max_pool1d(s, 2),
            F.avg_pool1d(s, 2), F.pad(s, (2, 1), mode="reflect"), F.interpolate(s, scale_factor=2),
        )  # fmt: skip
        return outs + tuple(y.stride() for y in outs)

    seq = (
        torch.randn(2, 6, 3).transpose(1, 2) if layout == "channels_last" else torch.randn(2, 3, 6)
    )
    assert_same_layouts(fn, volume(layout), seq)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_traced_code_branching_on_contiguity_after_pad_and_roll_matches_eager(layout):
    def fn(x):
        y = F.pad(x, (1, 1, 1, 1), mode="reflect")
        r = torch.roll(x, 1, 1)
        a = y.view(-1) * 2 if y.is_contiguous() else y.sum(1)
        b = r.view(2, -1) if r.is_contiguous() else r.permute(0, 2, 3, 1).reshape(2, -1)
        return a, b, F.pixel_shuffle(x, 2).stride()

    check(fn, image(layout, (2, 4, 5, 6)))


def test_view_of_a_channels_last_pad_raises_as_in_eager():
    def fn(x):
        return F.pad(x, (1, 1, 1, 1), mode="replicate").view(2, -1)

    x = image("channels_last", (2, 4, 5, 6))
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        fn(x)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torchlite.compile(fn)(x)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
def test_pads_pools_shuffles_and_roll_keep_eager_strides_cuda(layout):
    # NOTE: CUDA's kernels choose differently from the CPU's (reflection pad writes contiguous).
    x = image(layout, (2, 4, 6, 8)).cuda()
    if layout != "permuted":
        assert_same_layouts(pads_pools_shuffles, x)
        return

    # CUDA's channel_shuffle views its input: eager raises on a permuted one, and so must we.
    def shuffle(x):
        return F.channel_shuffle(x, 2)

    with pytest.raises(RuntimeError, match="view size is not compatible"):
        shuffle(x)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torchlite.compile(shuffle)(x)

    def without_shuffle(x):
        return pads_pools_shuffles(x, channel_shuffle=False)

    assert_same_layouts(without_shuffle, x)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_3d_pads_and_pools_keep_eager_strides_cuda(layout):
    def fn(v):
        outs = (
            F.pad(v, (1, 1, 1, 1, 1, 1), mode="replicate"), F.max_pool3d(v, 2),
            F.avg_pool3d(v, 2), F.adaptive_avg_pool3d(v, 2),
            F.interpolate(v, scale_factor=2, mode="trilinear"),
        )  # fmt: skip
        return outs + tuple(y.stride() for y in outs)

    assert_same_layouts(fn, volume(layout).cuda())
