"""torch.autocast regions in compiled code: ops inside are captured with autocast's dtypes
(CPU bfloat16: linear/matmul/conv give bf16, other ops keep their input dtype), in one graph,
and the results equal eager autocast in dtype and value.
"""

import warnings

import pytest
import torch
from helpers import assert_counters_delta, assert_same, counters
from torch import nn

import torchlite

BF16 = torch.bfloat16


def _with_block_on_autocast_is_captured():
    def probe(x):
        with torch.autocast("cpu", dtype=BF16):
            return x + 1

    report = torchlite.explain(probe)(torch.randn(2))
    torchlite.reset()
    return not any("with-block on a" in b.reason for b in report.break_reasons)


# NOTE: the `with` dispatch lives in tracer.cpp's BEFORE_WITH (see autocast.h); without it
# every region is a graph break and these tests do not apply.
pytestmark = pytest.mark.skipif(
    not _with_block_on_autocast_is_captured(),
    reason="BEFORE_WITH does not dispatch torch.autocast to capture/autocast.cpp yet",
)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 12)

    def forward(self, x):
        return torch.softmax(torch.relu(self.lin(x)), dim=-1)


def _one_graph(fn, *args):
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    before = counters()
    for _ in range(2):
        out, expected = compiled(*args), fn(*args)
        assert_same(out, expected)
    assert_counters_delta(before, counters(), graphs=1, graph_breaks=0, recompiles=0)
    return out


def test_linear_relu_softmax_under_cpu_bf16_autocast_matches_eager():
    torch.manual_seed(0)
    head = Head()

    def fn(x):
        with torch.autocast("cpu", dtype=BF16):
            y = head(x)
        return y, y.float() * 2

    out = _one_graph(fn, torch.randn(8, 16))
    assert out[0].dtype == BF16 and out[1].dtype == torch.float32


def test_only_autocast_ops_change_dtype():
    torch.manual_seed(0)
    w = torch.randn(16, 16)

    def fn(x):
        with torch.autocast("cpu", dtype=BF16):
            a = x @ w  # matmul: bf16
            b = x.exp()  # unaffected: f32
            c = torch.nn.functional.linear(x, w)  # bf16
            d = a + b  # promotion: f32
            e = torch.mm(a, c.t())  # already bf16
        return a, b, c, d, e

    out = _one_graph(fn, torch.randn(4, 16))
    assert [t.dtype for t in out] == [BF16, torch.float32, BF16, torch.float32, BF16]


def test_nested_disabled_region_computes_in_float32():
    torch.manual_seed(0)
    head = Head()

    def fn(x):
        with torch.autocast("cpu", dtype=BF16):
            y = head(x)
            with torch.autocast("cpu", enabled=False):
                z = torch.mm(x, x.t())  # f32 again
                z2 = torch.mm(y.float(), y.float().t())
            u = torch.mm(x, x.t())  # bf16 again after the inner region
        v = torch.mm(x, x.t())  # outside: f32
        return y, z, z2, u, v

    out = _one_graph(fn, torch.randn(6, 16))
    assert [t.dtype for t in out] == [BF16, torch.float32, torch.float32, BF16, torch.float32]
    assert not torch.is_autocast_enabled("cpu")


def test_conv_under_autocast_and_gradients_match_eager():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3)

    def fn(x):
        with torch.autocast("cpu", dtype=BF16):
            return conv(x).sigmoid().sum()

    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    x2 = x.detach().clone().requires_grad_()
    out, expected = compiled(x), fn(x2)
    assert_same(out, expected)
    out.backward()
    expected.backward()
    assert_same(x.grad, x2.grad, atol=1e-2, rtol=1e-2)


class BiasFree(nn.Module):
    """Layers without bias: every later layer sees a bf16 activation beside a float32 weight,
    which meta kernels accept (mm of bf16 and float32 gives bf16 on meta) and a real CPU kernel
    rejects, so only autocast's own cast of the weight makes it run."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 16, bias=False)
        self.l2 = nn.Linear(16, 8, bias=False)
        self.w = nn.Parameter(torch.randn(8, 8) / 3)
        self.conv1 = nn.Conv2d(3, 4, 3, bias=False)
        self.conv2 = nn.Conv2d(4, 4, 3, bias=False)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x, img):
        with torch.autocast("cpu", dtype=BF16):
            h = self.l2(self.l1(x))
            mats = (h @ self.w, torch.mm(h, self.w), torch.bmm(h[None], self.w[None]))
            # NOTE: batch norm is on none of autocast's lists: its float32 running statistics
            # must not become bf16 copies (the update would be lost)
            feat = self.bn(self.conv2(self.conv1(img).relu()))
        return mats, feat.float().mean((2, 3))


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_mixed_bf16_activation_and_float32_weight_are_cast_as_autocast_does(grad):
    torch.manual_seed(0)
    model = BiasFree().train()
    twin = BiasFree().train()
    twin.load_state_dict(model.state_dict())
    x, img = torch.randn(4, 16), torch.randn(2, 3, 10, 10)
    torchlite.reset()
    compiled = torchlite.compile(model, fullgraph=True)
    for _ in range(2):
        with torch.set_grad_enabled(grad):
            out, expected = compiled(x, img), twin(x, img)
        assert_same(out, expected, atol=2e-2, rtol=2e-2)
        assert [t.dtype for t in out[0]] == [BF16] * 3
        torch.testing.assert_close(model.bn.running_mean, twin.bn.running_mean)
        assert model.bn.running_mean.dtype == torch.float32
        if grad:
            loss = sum(t.float().square().sum() for t in out[0]) + out[1].square().sum()
            ref = sum(t.float().square().sum() for t in expected[0]) + expected[1].square().sum()
            loss.backward()
            ref.backward()
            for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, atol=5e-2, rtol=5e-2, msg=name)
                p.grad = q.grad = None


def test_torch_amp_autocast_and_deprecated_cpu_amp_autocast():
    torch.manual_seed(0)
    head = Head()

    def amp(x):
        with torch.amp.autocast("cpu", dtype=BF16):
            return head(x)

    def cpu_amp(x):
        with torch.cpu.amp.autocast():
            return head(x)

    x = torch.randn(3, 16)
    assert _one_graph(amp, x).dtype == BF16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert _one_graph(cpu_amp, x).dtype == BF16
    # Shown: torch's FutureWarning runs eagerly (a warning_call break), still correct.
    torchlite.reset()
    compiled = torchlite.compile(cpu_amp)
    with pytest.warns(FutureWarning, match="torch.cpu.amp.autocast"):
        assert_same(compiled(x), cpu_amp(x))


def test_autocast_state_inside_region_is_seen_by_traced_code():
    def fn(x):
        with torch.autocast("cpu", dtype=BF16):
            on = torch.is_autocast_enabled("cpu")
            y = x * 2 if on else x * 3
        return y, torch.is_autocast_enabled("cpu")

    _one_graph(fn, torch.randn(3))


def test_called_inside_an_eager_autocast_region():
    torch.manual_seed(0)
    head = Head()

    def fn(x):
        return head(x) * 2, torch.mm(x, x.t())

    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    x = torch.randn(5, 16)
    with torch.autocast("cpu", dtype=BF16):
        out, expected = compiled(x), fn(x)
    assert_same(out, expected)
    assert [t.dtype for t in out] == [BF16, BF16]
    # Outside the region the guards fail and the float32 version is captured.
    assert_same(compiled(x), fn(x))
    assert compiled(x)[0].dtype == torch.float32


def test_graph_break_inside_region_reenters_it_for_the_rest():
    torch.manual_seed(0)
    head = Head()

    def fn(x):
        with torch.autocast("cpu", dtype=BF16):
            y = head(x)
            print("inside")  # graph break: runs eagerly, still inside the region
            z = torch.mm(y, y.t())
        return z, torch.mm(x, x.t())

    torchlite.reset()
    compiled = torchlite.compile(fn)
    x = torch.randn(4, 16)
    for _ in range(2):
        out, expected = compiled(x), fn(x)
        assert_same(out, expected)
        assert [t.dtype for t in out] == [BF16, torch.float32]
        assert not torch.is_autocast_enabled("cpu")
    report = torchlite.explain(fn)(x)
    assert "unsupported_builtin" in [b.kind for b in report.break_reasons]


def test_autocast_decorator_is_inlined_in_one_graph():
    torch.manual_seed(0)
    head = Head()

    @torch.autocast("cpu", dtype=BF16)
    def inner(x):
        return head(x)

    def fn(x):
        return inner(x) * 2

    assert _one_graph(fn, torch.randn(3, 16)).dtype == BF16


def test_changing_the_autocast_dtype_recompiles():
    lin = torch.nn.Linear(8, 8)

    def fn(x):
        return lin(x).relu()

    compiled = torchlite.compile(fn)
    x = torch.randn(4, 8)
    for dtype in (torch.bfloat16, torch.float16, torch.bfloat16):
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            out, expected = compiled(x), fn(x)
        assert out.dtype == expected.dtype == dtype
        torch.testing.assert_close(out, expected)
