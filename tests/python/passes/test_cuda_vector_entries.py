"""Which CUDA kernels get a 16-byte vectorised entry (checked without a GPU; the GPU tests in
tests/python/cuda/test_cuda_kernels.py check both entries against eager):

- pointwise kernels where some buffers are contiguous along the innermost axis, the others read
  element by element (a channels-last batch norm's per-channel parameters: stride 0 along the
  rows, 1 along the channels);
- warp- and block-row reductions whose row is whole 16-byte packs, with every contiguous
  buffer's rows starting pack-aligned (softmax, layer norm);
- not when the row or the innermost axis is not whole packs."""

import re

import pytest
import torch
import torch.nn.functional as F
from helpers import nvrtc_missing

import torchlite
from torchlite import _C

BF16 = torch.bfloat16


def _kernels(fn, *args):
    """(name, source, launch) of each kernel of the one graph `fn` captures."""
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(*args).graphs
    return [
        (n, s, launch) for n, s, _, launch in _C.cuda_kernel_sources(graph, "compute_90", False)
    ]


def _vector_source(name, source, launch):
    assert launch["vector_name"] == name + "_v", launch
    return source[source.index(name + "_v(") :]


def _bn_relu(x, mean, var, w, b):
    return torch.relu((x - mean) * torch.rsqrt(var + 1e-5) * w + b)


@pytest.mark.parametrize("channels", [16, 64])
def test_channels_last_per_channel_parameters_use_packs(channels):
    x = torch.randn(4, channels, 5, 5, dtype=BF16).to(memory_format=torch.channels_last)
    params = [torch.randn(channels, 1, 1, dtype=BF16) for _ in range(4)]
    ((name, source, launch),) = _kernels(_bn_relu, x, *params)
    vec = _vector_source(name, source, launch)
    # The activation and every per-channel parameter move in packs of 8 bf16.
    for i in range(5):
        assert f"tl_pack<unsigned short, 8>*>(in{i} + o0_{i})" in vec, vec
    assert sorted(launch["aligned_params"]) == [0, 1, 2, 3, 4, 5]


def test_channels_not_whole_packs_get_no_vector_entry():
    x = torch.randn(4, 12, 5, 5, dtype=BF16).to(memory_format=torch.channels_last)
    params = [torch.randn(12, 1, 1, dtype=BF16) for _ in range(4)]
    ((_, _, launch),) = _kernels(_bn_relu, x, *params)
    assert launch["vector_name"] == ""


def test_a_transposed_operand_keeps_the_scalar_entry():
    a = torch.randn(64, 32)
    b = torch.randn(32, 64).t()
    ((_, _, launch),) = _kernels(lambda a, b: a * b + 1, a, b)
    assert launch["vector_name"] == ""


@pytest.mark.parametrize(
    "shape,dtype,width",
    [((64, 4096), BF16, 8), ((37, 768), torch.float32, 4), ((5, 20000), BF16, 8)],
)
def test_row_reductions_load_and_store_packs(shape, dtype, width):
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(shape[-1], dtype=dtype)

    def fn(x, w):
        return F.layer_norm(torch.softmax(x, -1) + x, (x.shape[-1],), w)

    ((name, source, launch),) = _kernels(fn, x, w)
    vec = _vector_source(name, source, launch)
    assert "pk0 = *reinterpret_cast<const tl_pack<" in vec
    # The output's packs, stored at each pack's last element: bfloat16 converted in pairs.
    if dtype == BF16:
        assert f"if (j % {width} == {width - 1}) {{" in vec
        assert "tl_f2bf2(so0[0], so0[1])" in vec and "tl_f2bf(" not in vec
    else:
        assert f"if (j % {width} == {width - 1}) *reinterpret_cast<" in vec
    assert "*reinterpret_cast<tl_pack<" in vec
    assert "out0[" not in vec  # no element-wise store left


@pytest.mark.parametrize("dtype,convert", [(BF16, "tl_f2bf2"), (torch.float16, "tl_f2h2")])
def test_half_outputs_convert_in_pairs_and_round_once(dtype, convert):
    """A pointwise chain ending in a 16-bit float: its float32 result is rounded once, two
    neighbouring elements by one conversion, as it is stored."""
    x = torch.randn(64, 256, dtype=dtype)
    # NOTE: the last op is no add/mul of two 16-bit values (0.3 is none), so no pair op's word.
    ((name, source, launch),) = _kernels(lambda x: torch.sigmoid(x * 2 + 1).relu() * 0.3, x)
    vec = _vector_source(name, source, launch)
    for k in range(4):
        assert f"p0_1.e[{k}] = {convert}(f0_1[{2 * k}], f0_1[{2 * k + 1}]);" in vec, vec
    assert "*reinterpret_cast<tl_pack<unsigned, 4>*>(out0 + o0_1) = p0_1;" in vec
    # The product that f0_1 keeps is not rounded first (eager rounds it once, to store it).
    kept = re.search(r"f0_1\[j\] = (v\d+);", vec).group(1)
    assert re.search(rf"const float {kept} = \(v\d+ \* v\d+\);", vec), vec


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


@pytest.mark.parametrize("dtype,op", [(BF16, "tl_bf2op"), (torch.float16, "tl_h2op")])
def test_pointwise_pack_takes_two_elements_a_step_with_pair_ops(dtype, op):
    """The pointwise vector entry evaluates neighbouring elements in pairs: each add or mul of
    two 16-bit values that eager rounds to their type (GELU's x + 0.044715 * x^3, 1 + tanh,
    0.5 * x and the last product) is one bf16x2/f16x2 instruction for both, and an output that
    is one is stored as its word, with no float32 round trip."""
    x = torch.randn(64, 3072, dtype=dtype)
    ((name, source, launch),) = _kernels(_gelu_tanh, x)
    vec = _vector_source(name, source, launch)
    assert "for (int j = 0; j < 8; j += 2)" in vec, vec
    assert vec.count(op + "<") == 2 * 4, vec  # four pair ops a step, two steps (unrolled)
    assert re.search(r"p0_1\.e\[j / 2\] = w\d+;", vec), vec
    assert "f0_1[" not in vec  # no float32 array for the output: it is the last op's word
    assert "*reinterpret_cast<tl_pack<unsigned, 4>*>(out0 + o0_1) = p0_1;" in vec
    # The scalar entry (misaligned pointers) keeps one element a step.
    assert op + "<" not in source[: source.index(name + "_v(")]
    if not nvrtc_missing():
        assert f".entry {name}_v(".encode() in _C.nvrtc_compile(source, name, "compute_90")


@pytest.mark.parametrize(
    "fn",
    [lambda x: torch.sigmoid(x) * 0.3, lambda x: torch.exp(x).float()],
    ids=["no pair op", "float output"],
)
def test_pointwise_without_pair_ops_keep_one_element_a_step(fn):
    x = torch.randn(64, 256, dtype=BF16)
    ((name, source, launch),) = _kernels(fn, x)
    vec = _vector_source(name, source, launch)
    assert "j += 2" not in vec and "tl_bf2op" not in vec
    assert "; ++j)" in vec


def test_gathered_pointwise_keeps_one_element_a_step():
    """A cat's parts are gathers read at element j of their packs: no pairs there."""
    x, y = torch.randn(64, 128, dtype=BF16), torch.randn(64, 128, dtype=BF16)
    ((name, source, launch),) = _kernels(lambda x, y: torch.cat((x * y, y), -1), x, y)
    vec = _vector_source(name, source, launch)
    assert "j += 2" not in vec


@pytest.mark.parametrize("dtype,op", [(BF16, "tl_bf2op"), (torch.float16, "tl_h2op")])
def test_residual_sum_of_a_layer_norm_is_stored_as_its_words(dtype, op):
    """add + layer_norm: the sum `h = x + r` is an output and the norm's input. Its pair op's
    word (x + r in one bf16x2 add for two elements) is stored as it is, not recomputed in
    float32 and converted again."""
    x, r = torch.randn(512, 768, dtype=dtype), torch.randn(512, 768, dtype=dtype)
    w, b = torch.randn(768, dtype=dtype), torch.randn(768, dtype=dtype)

    def add_ln(x, r, w, b):
        h = x + r
        return h, F.layer_norm(h, (768,), w, b)

    ((name, source, launch),) = _kernels(add_ln, x, r, w, b)
    vec = _vector_source(name, source, launch)
    word = re.search(rf"const unsigned (w\d+) = {op}<0>\(w\d+, w\d+\);", vec)
    assert word, vec
    assert f"sw0.e[(j % 8) / 2] = {word.group(1)};" in vec, vec
    assert "if (j % 8 == 6) *reinterpret_cast<tl_pack<unsigned, 4>*>(out0 + (o4 - 6)) = sw0;" in vec
    assert "so0" not in vec  # no float32 values of the sum kept to convert
    if not nvrtc_missing():
        assert f".entry {name}_v(".encode() in _C.nvrtc_compile(source, name, "compute_90")


def test_rows_not_whole_packs_get_no_vector_entry():
    ((_, _, launch),) = _kernels(lambda x: torch.softmax(x, -1), torch.randn(64, 100, dtype=BF16))
    assert launch["vector_name"] == ""


def test_several_block_reductions_share_barriers():
    """One barrier per block reduction: the next row's writes to a reduction's shared slots
    come after another reduction's barrier. A lone reduction keeps its second barrier."""
    x = torch.randn(64, 4096)
    ((name, source, _),) = _kernels(lambda x: torch.softmax(x, -1), x)
    scalar = source[source.index(name + "(") : source.index(name + "_v(")]
    assert scalar.count("__syncthreads()") == 2  # max and sum
    ((name, source, _),) = _kernels(lambda x: x.sum(-1), x)
    scalar = source[source.index(name + "(") : source.index(name + "_v(")]
    assert scalar.count("__syncthreads()") == 2  # the sum's, and the one before the next row


@pytest.mark.parametrize("dtype,points", [(BF16, 8), (torch.float32, 4)])
def test_kernels_without_a_vector_entry_unroll_their_scalar_loop(dtype, points):
    """Rows of 99 elements are not whole packs: the scalar entry then handles several points per
    loop step (all loads before the stores; twice as many for 2-byte types), all but the first
    guarded."""
    ((name, source, launch),) = _kernels(lambda x: x[:, :99] * 2, torch.randn(64, 100, dtype=dtype))
    assert launch["vector_name"] == ""
    body = source[source.index(name + "(") :]
    assert f"i += {points} * step" in body
    for u in range(1, points):
        assert f"if (i + {u} * step < 6336) out0[" in body, body


def _pairs_fn(x, y):
    t = (x * 0.125 + y) - x * 2
    return t, t.amax(-1)


@pytest.mark.parametrize("dtype,op", [(BF16, "tl_bf2op<"), (torch.float16, "tl_h2op<")])
def test_row_entries_of_16_bit_kernels_evaluate_elements_in_pairs(dtype, op):
    """The vector entry takes two neighbouring elements a step; each 16-bit add, sub or mul of
    two 16-bit values (x * 0.125 and x * 2: exact constants) is one instruction for both. The
    scalar entry keeps one element a step."""
    x, y = torch.randn(64, 1024, dtype=dtype), torch.randn(64, 1024, dtype=dtype)
    ((name, source, launch),) = _kernels(_pairs_fn, x, y)
    vec = _vector_source(name, source, launch)
    assert "j += 2" in vec
    for k in range(3):
        assert f"{op}{k}>(" in vec, vec  # add, sub, mul
    scalar = source[source.index(name + "(") : source.index(name + "_v(")]
    assert "2op<" not in scalar and "j += 2" not in scalar


def test_float32_rows_and_inexact_constants_keep_one_element_a_step():
    ((_, source, _),) = _kernels(_pairs_fn, torch.randn(64, 1024), torch.randn(64, 1024))
    assert "2op<" not in source and "j += 2" not in source
    # 0.1 is no bfloat16: eager multiplies by the float32 0.1 and rounds, so no pair op.
    x = torch.randn(64, 1024, dtype=BF16)
    ((_, source, _),) = _kernels(lambda x: (x * 0.1).amax(-1), x)
    assert "2op<" not in source


def test_pair_ops_compile_natively_on_sm90_and_through_float32_before():
    x, y = torch.randn(64, 1024, dtype=BF16), torch.randn(64, 1024, dtype=BF16)
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(_pairs_fn)(x, y).graphs
    ((_, _, ptx90, _),) = _C.cuda_kernel_sources(graph, "compute_90", True)
    ((_, _, ptx80, _),) = _C.cuda_kernel_sources(graph, "compute_80", True)
    ptx90, ptx80 = ptx90.decode(), ptx80.decode()
    assert "mul.rn.bf16x2" in ptx90 and "add.rn.bf16x2" in ptx90
    assert "mul.rn.bf16x2" not in ptx80 and "cvt.rn.bf16x2.f32" in ptx80


def _bounds(source, entry):
    return re.search(r"__launch_bounds__\(([\d, ]+)\) " + entry + r"\(", source).group(1)


def test_block_rows_of_128_threads_cap_registers_with_an_uncapped_fallback():
    """The vector entry of a 128-thread block row asks for 8 blocks an SM (64 registers); the same
    entry without the cap sits beside it for the runtime to launch where the cap spills."""
    x, w, b = (
        torch.randn(16, 4096, dtype=BF16),
        torch.randn(4096, dtype=BF16),
        torch.randn(4096, dtype=BF16),
    )
    fn = lambda x, w, b: F.layer_norm(torch.softmax(x * 0.125, -1) + x, (4096,), w, b)
    ((name, source, launch),) = _kernels(fn, x, w, b)
    assert launch["block"] == 128
    assert launch["vector_fallback_name"] == name + "_vr"
    assert _bounds(source, name + "_v") == "128, 8"
    assert _bounds(source, name + "_vr") == "128"
    assert _bounds(source, name) == "128"  # the scalar entry (misaligned rows) is not capped
    # the two vector entries are the same code
    body = lambda e: source[source.index(e + "(") :].split("{", 1)[1].split("\n}\n", 1)[0]
    assert body(name + "_v") == body(name + "_vr")


@pytest.mark.parametrize("cols", [512, 8192])
def test_other_rows_have_no_register_cap(cols):
    x = torch.randn(64, cols)
    ((name, source, launch),) = _kernels(lambda x: torch.softmax(x, -1), x)
    assert launch["block"] != 128 or cols <= 1024
    assert launch["vector_fallback_name"] == ""
    assert "," not in _bounds(source, name + "_v")


@pytest.mark.parametrize("block", [128, 512])
def test_pointwise_kernels_build_at_other_block_sizes(block):
    # NOTE: max-autotune builds pointwise kernels at other block sizes (a constant of their
    # text: the launch bounds and the grid-stride step) and times each build's grids.
    def f(x, y):
        return (x * y + 1).sigmoid()

    torchlite.reset()
    x, y = torch.randn(1 << 16), torch.randn(1 << 16)
    with torch.no_grad():
        (graph,) = torchlite.explain(f)(x, y).graphs
    ((_, default, _, launch),) = _C.cuda_kernel_sources(graph, "compute_90", False)
    ((_, source, _, other),) = _C.cuda_kernel_sources(graph, "compute_90", False, block)
    assert launch["block"] == 256 and other["block"] == block
    assert f"__launch_bounds__({block})" in source and "__launch_bounds__(256)" in default
    assert other["grid"] == -(-launch["grid"] * 256 // block)  # the same points a thread
    assert f"blockIdx.x * {block} + threadIdx.x" in source


def _rope(q, cos, sin):
    h = q.shape[-1] // 2
    return q * cos + torch.cat((-q[..., h:], q[..., :h]), dim=-1) * sin


def test_cat_parts_move_in_packs():
    """A cat's parts are gathers at shifted, clamped offsets that run contiguously inside a
    part: the vector entry reads each in one 16-byte load where its offsets are contiguous and
    aligned, one element where they are all one (the part a point does not take)."""
    q = torch.randn(2, 4, 8, 64, dtype=BF16)
    cs = [torch.randn(8, 64, dtype=BF16) for _ in range(2)]
    ((name, source, launch),) = _kernels(_rope, q, *cs)
    vec = _vector_source(name, source, launch)
    packed = re.findall(
        r"= \*reinterpret_cast<const tl_pack<unsigned short, 8>\*>\(in(\d+) \+ a", vec
    )
    assert len(packed) == 2, vec  # both parts, `-x2` computed in this kernel
    assert "in" + packed[0] + "[a" in vec  # the one-element read of a part not taken


def test_window_gathers_keep_the_scalar_entry():
    x = torch.randn(2, 16, 8, 8, dtype=BF16)
    ((_, _, launch),) = _kernels(lambda x: F.max_pool2d(x, 2), x)
    assert not launch["vector_name"]


def test_stack_packs_read_only_the_part_their_point_takes():
    """stack's parts are chosen by a coordinate of another axis than the packs': one value a
    pack, so each part's pack is read only when the pack takes that part."""
    a, b, c = (torch.randn(4, 64, dtype=BF16) for _ in range(3))
    fn = lambda a, b, c: torch.stack([a * 2, b + 1, c.exp()], 1)
    ((name, source, launch),) = _kernels(fn, a, b, c)
    vec = _vector_source(name, source, launch)
    guarded = re.findall(r"if \([^\n]*\) p0_(\d+) = \*reinterpret_cast", vec)
    assert sorted(guarded) == ["0", "1", "2"], vec


def _channel_cat(*parts):
    # inception's blocks: each branch's activation, joined along the channels
    return torch.cat([torch.relu(p) for p in parts], 1)


def _gather_packs(vec):
    """{gather pack name: its guard, or None when read always} of step 0."""
    found = re.findall(r"tl_pack<unsigned short, 8> (g0_\d+)(\{\};\n\s*if \(([^\n]*)\) \{|;)", vec)
    return {name: guard or None for name, _, guard in found}


@pytest.mark.parametrize("channels", [(64, 64, 96, 32), (192, 192, 192, 192), (16, 8)])
def test_channel_cat_packs_read_only_the_part_they_take(channels):
    """A channels-last cat along the channels picks its part by the channel coordinate, which
    runs along the packs; with every part's bound on a pack boundary the test is one value a
    pack, so a pack reads only its own part (it read every part: 4x the traffic of
    inception_v3's four-branch cats)."""
    parts = [
        torch.randn(2, c, 3, 5, dtype=BF16).to(memory_format=torch.channels_last) for c in channels
    ]
    ((name, source, launch),) = _kernels(_channel_cat, *parts)
    guards = _gather_packs(_vector_source(name, source, launch))
    assert len(guards) == len(channels) and all(guards.values()), guards
    # The parts' conditions exclude each other: each later part's guard negates the earlier.
    firsts = [g.split(" && ")[0] for g in guards.values()]
    assert firsts[0] == firsts[1].lstrip("!"), guards
    if not nvrtc_missing():
        assert f".entry {name}_v(".encode() in _C.nvrtc_compile(source, name, "compute_90")


def _bn_relu_branches(*args):
    """inception_v3's Mixed block output: a channel cat of batch-norm + ReLU branches, each with
    its own activation and four per-channel parameters (eval batch norm)."""
    outs = []
    for i in range(0, len(args), 5):
        x, mean, var, w, b = args[i : i + 5]
        outs.append(torch.relu(F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-3)))
    return torch.cat(outs, 1)


def _branches(channels, hw=5):
    args = []
    for c in channels:
        args.append(torch.randn(2, c, hw, hw, dtype=BF16).to(memory_format=torch.channels_last))
        args += [torch.randn(c, dtype=BF16), torch.rand(c, dtype=BF16) + 0.5]
        args += [torch.randn(c, dtype=BF16), torch.randn(c, dtype=BF16)]
    return args


@pytest.mark.parametrize("channels", [(64, 64, 96, 32), (64, 64)], ids=str)
def test_a_cat_of_parts_with_their_own_parameters_takes_the_scalar_entry(channels):
    """More gathered buffers than packs in flight (5 a branch): the vector entry would hold every
    part's packs and compute every part for each element (177 registers a thread for inception's
    four branches); the scalar entry computes only the part an element takes."""
    ((name, source, launch),) = _kernels(_bn_relu_branches, *_branches(channels))
    assert launch["vector_name"] == "", launch
    body = source[source.index(name + "(") :]
    # Branching: each part's activation is read inside the branch that takes it.
    assert body.count("rsqrtf(") == len(channels), body
    assert re.search(r"if \(v\d+\) \{", body), body


def test_a_cat_of_plain_parts_and_a_pool_window_keep_their_packs():
    # densenet's cats of many plain parts (a batch norm after the cat reads its parameters by
    # channel, not per part), and a window gathering one buffer 9 times.
    parts = [
        torch.randn(2, 16, 3, 5, dtype=BF16).to(memory_format=torch.channels_last)
        for _ in range(10)
    ]
    ((_, _, launch),) = _kernels(_channel_cat, *parts)
    assert launch["vector_name"], launch
    x = torch.randn(2, 64, 9, 9, dtype=BF16).to(memory_format=torch.channels_last)
    ((name, _, launch),) = _kernels(lambda x: F.avg_pool2d(x, 3, 1, 1), x)
    assert launch["vector_name"] == name + "_v", launch


@pytest.mark.parametrize(
    "pool",
    [
        lambda x: F.avg_pool2d(x, 3, 1, 1),
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        lambda x: F.max_pool2d(x * 2, 3, 2),
    ],
    ids=["avg-3x3", "avg-ceil", "max-stride-2"],
)
def test_pool_windows_read_each_offset_in_one_aligned_load(pool):
    """A channels-last window reads its input at (row, column) offsets that are multiples of
    the channel count, itself whole packs: each of the 9 reads is one aligned 16-byte load,
    without the run-time contiguity test and its two element loops (97 -> 80 registers a
    thread for inception_v3's 3x3 average pool)."""
    x = torch.randn(2, 24, 9, 9, dtype=BF16).to(memory_format=torch.channels_last)
    (name, source, launch) = next(k for k in _kernels(pool, x) if "pool" in k[0])
    vec = _vector_source(name, source, launch)
    loads = re.findall(r"= \*reinterpret_cast<const tl_pack<unsigned short, 8>\*>\(in0 \+ a", vec)
    assert len(loads) == 9, vec
    assert "else if (a" not in vec and "for (int j = 0; j < 8; ++j) g" not in vec, vec
    if not nvrtc_missing():
        assert f".entry {name}_v(".encode() in _C.nvrtc_compile(source, name, "compute_90")


@pytest.mark.parametrize("channels", [(12, 20), (4, 28)])
def test_channel_cat_parts_off_pack_boundaries_read_every_part(channels):
    # A pack straddles the bound 12 (or 4): its elements take both parts.
    parts = [
        torch.randn(2, c, 3, 5, dtype=BF16).to(memory_format=torch.channels_last) for c in channels
    ]
    ((name, source, launch),) = _kernels(_channel_cat, *parts)
    guards = _gather_packs(_vector_source(name, source, launch))
    assert len(guards) == 2 and not any(guards.values()), guards


@pytest.mark.parametrize(
    "pad,guarded", [((8, 16), True), ((3, 5), False)], ids=["on-packs", "off-packs"]
)
def test_padding_along_the_packs_reads_only_inside(pad, guarded):
    # F.pad's test lo <= x < lo + n (a reversed comparison and an And) is one value a pack when
    # both bounds fall on pack boundaries: packs of the padding read nothing.
    x = torch.randn(4, 6, 32, dtype=BF16)
    ((name, source, launch),) = [k for k in _kernels(lambda x: F.pad(x, pad), x) if "pad" in k[0]]
    if not launch["vector_name"]:
        assert not guarded
        return
    guards = _gather_packs(_vector_source(name, source, launch))
    assert len(guards) == 1 and bool(next(iter(guards.values()))) == guarded, (guards, source)


@pytest.mark.parametrize("dim", [0, 1])
def test_cat_along_an_outer_axis_packs_read_only_their_part(dim):
    # The part test compares a coordinate of another axis than the packs' with the bound: one
    # value a pack whatever the bound.
    x, y = torch.randn(37, 5, 64, dtype=BF16), torch.randn(37, 3, 64, dtype=BF16)
    if dim == 0:
        x, y = x[:, :3], y[:7].expand(7, 3, 64).contiguous()
    fn = lambda x, y: torch.cat([x.cos(), y * 2], dim) + 1
    ((name, source, launch),) = _kernels(fn, x, y)
    vec = _vector_source(name, source, launch)
    guarded = re.findall(r"if \([^\n]*\) p0_(\d+) = \*reinterpret_cast", vec)
    guards = _gather_packs(vec)
    assert len(guarded) + sum(bool(g) for g in guards.values()) == 2, vec
