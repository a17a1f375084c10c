"""CUDA kernels with runtime sizes keep the static schedule of what stays constant (checked
without a GPU; tests/python/cuda/test_cuda_constant_rows.py runs them against eager).

With dynamic shapes every size, stride and offset of a kernel's loop space goes to the dims
parameter (`tl_d.v[k]`), so one compiled program serves every size with the same text. A layer
norm's (or a mean's) text holds its row's length anyway (the mean's divisor is a constant of its
expressions), so its row keeps the length as a literal and the schedule of a static compile: the
row-cache loops run without a bound check per element. Only the row count and the row strides
come from the dims."""

import re

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C


def _sources(fn, *args, runtime_sizes):
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(*args).graphs
    return [
        (s, launch)
        for _, s, _, launch in _C.cuda_kernel_sources(
            graph, "compute_90", False, runtime_sizes=runtime_sizes
        )
    ]


def _add_layer_norm(x, r, w, b):
    h = x + r
    return h, F.layer_norm(h, (x.shape[-1],), w, b)


def _rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _softmax(x):
    return torch.softmax(x, -1)


def _args(fn, rows, width, dtype):
    x = torch.randn(rows, width, dtype=dtype)
    w = torch.randn(width, dtype=dtype)
    if fn is _add_layer_norm:
        return x, torch.randn_like(x), w, torch.randn_like(w)
    if fn is _rms_norm:
        return x, w
    return (x,)


def _dims(source):
    return set(re.findall(r"tl_d\.v\[\d+\]", source))


def _row_checks(source):
    return re.findall(r"if \(r < [^)]*\)", source)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fn", [_add_layer_norm, _rms_norm], ids=["add_layer_norm", "rms_norm"])
def test_rows_of_a_known_length_keep_the_static_schedule(fn, dtype):
    ((static, s_launch),) = _sources(fn, *_args(fn, 4096, 768, dtype), runtime_sizes=False)
    ((dynamic, d_launch),) = _sources(fn, *_args(fn, 4096, 768, dtype), runtime_sizes=True)
    assert d_launch["vector_name"] and d_launch["vector_name"] == s_launch["vector_name"]
    assert (d_launch["block"], d_launch["grid"]) == (s_launch["block"], s_launch["grid"])
    # 768 = 32 lanes x whole packs: no element of the row-cache loops checks the row's end
    assert _row_checks(static) == []
    assert _row_checks(dynamic) == []
    if _C.nvrtc_available():
        assert _C.nvrtc_compile(dynamic, "k", "compute_90")
    # the row count and the row strides come from the dims, nothing along the row but the
    # mean's count (RuleCtx::count: a dims number, so a row of runtime length keeps one text)
    assert "tl_d.v[" in dynamic
    for line in dynamic.splitlines():
        if "tl_d.v[" in line and not re.fullmatch(
            r"\s*const int v\d+ = \(\(int\)tl_d\.v\[\d+\]\);", line
        ):
            assert re.search(r"row < tl_d|row \* tl_d|tile < tl_d", line), line
    # the same text serves another row count (one compile), with other numbers
    ((other, _),) = _sources(fn, *_args(fn, 777, 768, dtype), runtime_sizes=True)
    assert other == dynamic


def test_rows_whose_length_is_not_whole_steps_keep_their_bound_check():
    x = _args(_add_layer_norm, 64, 1000, torch.float32)
    ((static, _),) = _sources(_add_layer_norm, *x, runtime_sizes=False)
    ((dynamic, _),) = _sources(_add_layer_norm, *x, runtime_sizes=True)
    assert _row_checks(dynamic) and set(_row_checks(dynamic)) == set(_row_checks(static))
    assert all("1000" in c for c in _row_checks(dynamic))


def test_rows_without_their_length_in_the_text_keep_a_runtime_length():
    # a softmax's text holds no length: one program serves every row length with the same
    # schedule, so the length stays a dims number (and each cached element checks it)
    ((dynamic, _),) = _sources(_softmax, torch.randn(64, 768), runtime_sizes=True)
    ((other, _),) = _sources(_softmax, torch.randn(64, 744), runtime_sizes=True)
    assert any("tl_d" in c for c in _row_checks(dynamic))
    assert other == dynamic


def _bias_gelu(x, b):
    return F.gelu(x + b, approximate="tanh")


@pytest.mark.parametrize("shape", [(4096, 3072), (37, 1000), (5, 3)])
def test_runtime_divisors_divide_by_magic_numbers(shape):
    # a broadcast bias: the linear index splits into (row, column) by the row's width, a dims
    # number: a multiply-high and a shift by numbers of the dims, no division instruction
    x, b = torch.randn(*shape), torch.randn(shape[-1])
    ((static, _),) = _sources(_bias_gelu, x, b, runtime_sizes=False)
    ((dynamic, _),) = _sources(_bias_gelu, x, b, runtime_sizes=True)
    assert re.search(rf"% {shape[-1]};", static)
    assert not re.search(r"[%/] tl_d\.v\[\d+\]", dynamic)
    assert re.search(r"__umulhi\(\w+, tl_d\.v\[\d+\]\) \+ \w+\) >> tl_d\.v\[\d+\]", dynamic)
    if _C.nvrtc_available():
        assert _C.nvrtc_compile(dynamic, "k", "compute_90")
    if shape[-1] % 8:
        return  # rows not whole packs: no vector entry, another text
    # one text for every size whose rows are whole packs
    ((other, _),) = _sources(
        _bias_gelu, torch.randn(129, 768), torch.randn(768), runtime_sizes=True
    )
    assert other == dynamic
