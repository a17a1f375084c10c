"""Runtime-size CUDA kernels write the sizes that are model constants as literals (checked
without a GPU; tests/python/cuda/test_cuda_model_constant_sizes.py runs them against eager).

A frame compiled for every size knows which sizes are the model's own (its parameters' sizes,
the constants of its graph: `view(b, t, 12, 64)`) and which change between calls (the batch, the
sequence length): `pipeline::PassContext::static_sizes`, turned into `ir::Kernel::static_axes`.
A softmax, a sum or an amax over a row of such a width then gets the static schedule (its row
length a literal: no bound check per element of the row cache), and a pointwise kernel whose
constant factors are whole packs drops its scalar tail, while the row count (and whatever else
changes) still comes from the dims parameter: one text for every row count."""

import re

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C


def _sources(fn, *args, runtime_sizes=True, static_sizes=()):
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(*args).graphs
    return [
        (s, launch)
        for _, s, _, launch in _C.cuda_kernel_sources(
            graph,
            "compute_90",
            False,
            runtime_sizes=runtime_sizes,
            static_sizes=list(static_sizes),
        )
    ]


def _row_checks(source):
    return re.findall(r"if \(r < [^)]*\)", source)


def _softmax(x):
    return torch.softmax(x, -1)


def _sum(x):
    return x.sum(-1)


def _amax(x):
    return x.amax(-1)


def _var(x):
    return x.var(-1)


_ROWS = {"softmax": _softmax, "sum": _sum, "amax": _amax, "var": _var}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(_ROWS))
def test_rows_over_a_model_constant_keep_the_static_schedule(name, dtype):
    fn = _ROWS[name]
    x = torch.randn(4096, 768, dtype=dtype)
    ((static, s_launch),) = _sources(fn, x, runtime_sizes=False)
    ((plain, _),) = _sources(fn, x)
    ((fixed, f_launch),) = _sources(fn, x, static_sizes=[768])
    assert (f_launch["block"], f_launch["grid"]) == (s_launch["block"], s_launch["grid"])
    assert f_launch["vector_name"] == s_launch["vector_name"]
    # the row's length is a literal: the row-cache loops check what the static text checks
    assert _row_checks(fixed) == _row_checks(static)
    assert all("tl_d" not in c for c in _row_checks(fixed))
    if name != "var":  # a variance's text holds its length anyway (a constant row)
        assert any("tl_d" in c for c in _row_checks(plain)) or "r < tl_d" in plain
    # only the row count comes from the dims
    for line in fixed.splitlines():
        # NOTE: but a mean's count (RuleCtx::count), a dims number like any count: kept as a
        # literal where it equals a model constant, a length equal to one at a step of a
        # generate() loop gave its kernels another text (test_generate.py)
        if "tl_d.v[" in line and not re.fullmatch(
            r"\s*const int v\d+ = \(\(int\)tl_d\.v\[\d+\]\);", line
        ):
            assert re.search(r"row < tl_d|tile < tl_d", line), line
    if _C.nvrtc_available():
        assert _C.nvrtc_compile(fixed, "k", "compute_90")
    # the same text serves another row count
    ((other, _),) = _sources(fn, torch.randn(777, 768, dtype=dtype), static_sizes=[768])
    assert other == fixed


def test_a_row_whose_length_is_not_a_model_constant_keeps_a_runtime_length():
    # attention scores over the sequence: the row's length changes with it
    x = torch.randn(64, 211)
    ((text, _),) = _sources(_softmax, x, static_sizes=[64, 768])
    assert any("tl_d" in c for c in _row_checks(text))
    ((other, _),) = _sources(_softmax, torch.randn(64, 199), static_sizes=[64, 768])
    assert other == text


def test_rows_of_a_constant_width_over_several_axes():
    # a sum over heads x dims of a [b, t, 12, 64] view: both reduced axes are constants
    x = torch.randn(4, 37, 12, 64)
    ((static, _),) = _sources(lambda v: v.sum((-2, -1)), x, runtime_sizes=False)
    ((fixed, _),) = _sources(lambda v: v.sum((-2, -1)), x, static_sizes=[12, 64])
    assert _row_checks(fixed) == _row_checks(static)
    assert not re.search(r"r < tl_d", fixed)


def _gelu(x):
    return F.gelu(x, approximate="tanh")


def _tail(source):
    return re.findall(r"for \(\w+ i = tl_d\.v\[\d+\] \* \d+", source)


@pytest.mark.parametrize("shape", [(4, 37, 3072), (1, 3, 3072), (5, 1, 776)])
def test_pointwise_kernels_over_constant_whole_packs_drop_the_scalar_tail(shape):
    x = torch.randn(*shape)
    ((plain, _),) = _sources(_gelu, x)
    ((fixed, launch),) = _sources(_gelu, x, static_sizes=[shape[-1]])
    assert _tail(plain) and launch["vector_name"]
    assert not _tail(fixed)
    if _C.nvrtc_available():
        assert _C.nvrtc_compile(fixed, "k", "compute_90")
    # one text for every row count
    ((other, _),) = _sources(_gelu, torch.randn(3, 211, shape[-1]), static_sizes=[shape[-1]])
    assert other == fixed


def test_pointwise_kernels_keep_the_tail_where_the_constants_are_not_whole_packs():
    x = torch.randn(4, 38, 1001)
    ((fixed, _),) = _sources(_gelu, x, static_sizes=[1001])
    assert _tail(fixed)


def test_broadcast_pointwise_kernels_have_no_tail():
    # several axes: the vector entry exists only where the inner size is whole packs
    x, b = torch.randn(37, 768), torch.randn(768)
    ((text, launch),) = _sources(lambda x, b: _gelu(x + b), x, b)
    assert launch["vector_name"] and not _tail(text)
    ((other, _),) = _sources(lambda x, b: _gelu(x + b), torch.randn(129, 768), b)
    assert other == text
