"""CPU kernels whose index math divides by a size (Llama's repeat_kv copy, a transpose then
reshape, an expand of a derived length) take their sizes at run time and divide by their magic
numbers (codegen/cpu Emitter::magic_divide): no LLVM compile after the second length (before: one
per length, the divisors were literals). Integer division by a size-derived divisor is exact for
dividends on both sides of zero. Every result is checked against eager."""

import pytest
import torch

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

# NOTE: no length equal to a model constant (16, 12 = 3 x 4): a size that equals one makes
# another text at that size (a literal there: one compile, never a wrong result).
_LENGTHS = [5, 7, 9, 11, 13, 19, 23, 31]


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    torchlite.reset()


def _compiles_per_length(fn, make, lengths=_LENGTHS):
    compiled = torchlite.compile(fn)
    counts = []
    for n in lengths:
        args = make(n)
        before = _C.llvm_compiles()
        with torch.no_grad():
            out = compiled(*args)
        counts.append(_C.llvm_compiles() - before)
        torch.testing.assert_close(out, fn(*args))
    return counts


def _repeat_kv(x):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, 3, s, d).reshape(b, h * 3, s, d) * 2


def _transpose_reshape(x):
    b, s, h, d = x.shape
    return x.transpose(1, 2).reshape(b, h * s, d).sin()


def _expand_derived(x):
    b, h, s, d = x.shape
    return x[:, :, None, :1].expand(b, h, 3, s + 1, d).reshape(b, h * 3, s + 1, d) + 1


class _RepeatKV(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k = torch.nn.Linear(16, 2 * 8)

    def forward(self, x):
        b, s, _ = x.shape
        k = self.k(x).view(b, s, 2, 8).transpose(1, 2)
        k = k[:, :, None].expand(b, 2, 2, s, 8).reshape(b, 4, s, 8)
        return k.sum(-1)


@pytest.mark.parametrize(
    "fn,make",
    [
        (_repeat_kv, lambda n: (torch.randn(2, 2, n, 4),)),
        (_transpose_reshape, lambda n: (torch.randn(2, n, 3, 4),)),
        (_expand_derived, lambda n: (torch.randn(2, 2, n, 4),)),
    ],
    ids=["repeat_kv", "transpose_reshape", "expand_derived_length"],
)
def test_index_math_that_divides_compiles_no_cpu_kernel_after_the_second_length(fn, make):
    counts = _compiles_per_length(fn, make)
    assert sum(counts[2:]) == 0, counts


def test_a_repeat_kv_module_compiles_no_cpu_kernel_after_the_second_length():
    torch.manual_seed(0)
    model = _RepeatKV()
    counts = _compiles_per_length(model, lambda n: (torch.randn(2, n, 16),))
    assert sum(counts[2:]) == 0, counts


def _int_divisions(x):
    s = x.shape[1]  # a size-derived divisor: read from the dims array
    return (
        x // s,
        x % s,
        torch.div(x, s, rounding_mode="trunc"),
        torch.fmod(x, s),
        torch.div(x, s + 1, rounding_mode="floor"),
    )


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_division_by_a_runtime_size_is_exact_both_sides_of_zero(dtype):
    lengths = [2, 3, 4, 7, 8, 13, 64, 97]

    def make(n):
        x = torch.randint(-(1 << 40), 1 << 40, (3, n))
        x[0, :] = torch.arange(n) - n // 2  # small dividends around 0
        x[1, 0] = -(1 << 62)
        x[1, 1] = (1 << 62) + 12345
        if dtype == torch.int32:
            x = (x % (1 << 31) - (1 << 30)).to(dtype)
        return (x,)

    counts = _compiles_per_length(_int_divisions, make, lengths)
    assert sum(counts[2:]) == 0, counts
