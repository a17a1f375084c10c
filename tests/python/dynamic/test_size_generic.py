"""Dynamic shapes, layer 2, first slice (docs/internals/dynamic-shapes.md): a capture whose graph
does not depend on its inputs' sizes serves every size from one cache entry. A new size costs no
capture (counters()["frames"] stays put): the entry replays its graph at the new sizes and
compiles it (counters()["size_instances"]). A trace that reads a size keeps exact guards. Every
size is checked against eager."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

W = torch.randn(16, 12)


def _mlp_block(x):
    h = F.gelu(F.linear(x, W.t()) + 1)
    return torch.softmax(h * 0.5, dim=-1) + F.layer_norm(h, (12,)).relu()


def _rows(x):
    return (x * x).sum(-1) + x.amax(-1) - x.mean(dim=-1)


def _two_inputs(x, y):
    return (x @ y).tanh() + 1


def _sizes_read(x):
    b, t = x.shape[:2]
    return (x.view(b, t, 2, -1).transpose(1, 2) * 2).sum(-1)


def _branch_on_size(x):
    if x.size(0) > 6:
        return x * 2
    return x - 1


def _len_branch(x):
    return x + len(x)


def _count(fn, make_args, sizes, dynamic=None, compiled=None):
    """Runs `fn` compiled at each size, checks it against eager; returns the captures and the
    graphs compiled for new sizes without capture."""
    compiled = compiled or torchlite.compile(fn, dynamic=dynamic)
    before = dict(torchlite.counters())
    for n in sizes:
        args = make_args(n)
        torch.testing.assert_close(compiled(*args), fn(*args), atol=1e-5, rtol=1e-5)
    after = torchlite.counters()
    return after["frames"] - before["frames"], after["size_instances"] - before["size_instances"]


SIZES = [5, 9, 17, 3, 40, 11, 64, 7, 33, 2]


def test_a_size_sweep_captures_twice_and_matches_eager():
    frames, instances = _count(_mlp_block, lambda n: (torch.randn(2, n, 16),), SIZES)
    assert frames == 2, frames
    assert instances == len(SIZES) - 2, instances


def test_batch_and_length_change_together_in_one_entry():
    sizes = [(2, 5), (3, 9), (4, 4), (7, 2), (2, 31)]
    frames, instances = _count(_rows, lambda s: (torch.randn(*s),), sizes)
    assert (frames, instances) == (2, 3)


def _mask_from_tensor_factories(x, past, how):
    # NOTE: transformers' decoder masks make their ones from the cache (`past.new_ones(b, n)`),
    # with n growing by one each generated token: each call is a new size.
    n = past.shape[1] + x.shape[1]
    if how == "new_ones":
        m = past.new_ones(x.shape[0], n)
    elif how == "new_zeros":
        m = past.new_zeros(x.shape[0], n) + 2
    else:
        m = past.new_full((x.shape[0], n), 3.0)
    return (torch.cat([past, x], 1) * m).sum(-1)


@pytest.mark.parametrize("how", ["new_ones", "new_zeros", "new_full"])
def test_tensor_factory_methods_serve_every_cache_length_from_one_entry(how):
    lengths = [3, 4, 5, 6, 7, 9, 12]
    frames, instances = _count(
        lambda x, past: _mask_from_tensor_factories(x, past, how),
        lambda n: (torch.randn(2, 1), torch.randn(2, n)),
        lengths,
    )
    assert (frames, instances) == (2, len(lengths) - 2)


def test_dynamic_true_captures_once():
    frames, _ = _count(_two_inputs, lambda n: (torch.randn(n, 6), torch.randn(6, n)), [4, 8, 13])
    torchlite.reset()
    frames_true, instances = _count(
        _two_inputs, lambda n: (torch.randn(n, 6), torch.randn(6, n)), [4, 8, 13], dynamic=True
    )
    assert (frames, frames_true, instances) == (2, 1, 2)


def test_dynamic_false_captures_every_size():
    frames, instances = _count(_rows, lambda n: (torch.randn(3, n),), [4, 8, 13], dynamic=False)
    assert (frames, instances) == (3, 0)


def test_sizes_zero_and_one_are_specialised():
    sizes = [4, 6, 1, 7, 0, 9, 1, 5]
    frames, instances = _count(_rows, lambda n: (torch.randn(n, 5),), sizes, dynamic=True)
    # 4 (all sizes >= 2), 1 (dim 0 exact), 0 (exact): three captures; 6, 7, 9, 5 reuse the first.
    assert frames == 3 and instances == 4, (frames, instances)


def test_a_trace_that_reads_sizes_stays_generic_through_symbolic_sizes():
    # b, t are symbolic (tests/python/dynamic/test_sym_sizes.py): the view follows new sizes.
    frames, instances = _count(_sizes_read, lambda n: (torch.randn(2, n, 8),), [3, 5, 8, 5])
    assert (frames, instances) == (2, 1)


def test_a_branch_on_a_size_recaptures_across_the_threshold():
    # 4: exact; 5: generic, relying on size(0) <= 6; 8: that fails, so a capture relying on
    # size(0) > 6; 9, 3, 7 are served by one of the two.
    frames, instances = _count(_branch_on_size, lambda n: (torch.randn(n, 3),), [4, 5, 8, 9, 3, 7])
    assert (frames, instances) == (3, 3)


def test_len_of_a_tensor_is_a_symbolic_size():
    frames, instances = _count(_len_branch, lambda n: (torch.randn(n, 3),), [4, 5, 8, 9, 3, 7])
    assert (frames, instances) == (2, 4)


def test_mismatched_sizes_raise_as_eager_does():
    compiled = torchlite.compile(_two_inputs, dynamic=True)
    compiled(torch.randn(4, 6), torch.randn(6, 4))
    x, y = torch.randn(5, 6), torch.randn(7, 4)  # inner sizes disagree: eager raises
    with pytest.raises(RuntimeError) as got:
        compiled(x, y)
    with pytest.raises(RuntimeError) as want:
        _two_inputs(x, y)
    assert str(got.value) == str(want.value)


def test_a_broadcast_or_a_mismatch_at_new_sizes_is_what_eager_does():
    # Traced with equal dims (no broadcast); later 5 against 1 broadcasts and 3 against 7 raises.
    def add(x, y):
        return x + y * 2

    compiled = torchlite.compile(add)
    frames, instances = _count(
        add,
        lambda s: (torch.randn(s[0], 4), torch.randn(s[1], 4)),
        [(6, 6), (5, 5), (5, 1), (8, 8)],
        compiled=compiled,
    )
    assert (frames, instances) == (3, 1)
    with pytest.raises(RuntimeError, match="must match the size"):
        compiled(torch.randn(3, 4), torch.randn(7, 4))


def test_non_contiguous_inputs_recapture_and_stay_correct():
    frames, instances = _count(
        _rows, lambda n: (torch.randn(6, n).t() if n % 2 else torch.randn(n, 6),), [4, 8, 5, 10]
    )
    assert instances == 1 and frames == 3, (frames, instances)


def test_mark_dynamic_makes_the_first_capture_generic_within_its_range():
    def make(n):
        x = torch.randn(n, 6)
        torchlite.mark_dynamic(x, 0, min=2, max=40)
        return (x,)

    compiled = torchlite.compile(_rows)
    frames, instances = _count(_rows, make, [4, 12, 40, 2], compiled=compiled)
    assert (frames, instances) == (1, 3)
    with pytest.raises(ValueError, match=r"L\['x'\]\.size\(0\) is 41, outside the range"):
        x = torch.randn(41, 6)
        torchlite.mark_dynamic(x, 0, min=2, max=40)
        compiled(x)


def test_mark_dynamic_leaves_unmarked_dims_exact():
    def make(n):
        x = torch.randn(4, n)
        torchlite.mark_dynamic(x, 0)
        return (x,)

    frames, instances = _count(_rows, make, [5, 6, 7])
    assert (frames, instances) == (3, 0)


def test_modules_in_eval_share_one_entry_across_lengths():
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)
    ).eval()
    compiled = torchlite.compile(model)
    before = torchlite.counters()["frames"]
    with torch.no_grad():
        for n in [3, 7, 12, 5, 30]:
            x = torch.randn(2, n, 16)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert torchlite.counters()["frames"] - before == 2


def test_explain_shows_the_dynamic_dims():
    def fn(x):
        return _rows(x)

    x = torch.randn(3, 7)
    torchlite.mark_dynamic(x, 1, max=50)
    guards = torchlite.explain(fn)(x).guards
    assert any("TENSOR_MATCH L['x']" in g and "dynamic=1:2..50" in g for g in guards), guards


def test_mark_static_dims_stay_exact_under_dynamic_true():
    def make(s):
        x = torch.randn(*s)
        torchlite.mark_static(x, 1)
        return (x,)

    compiled = torchlite.compile(_rows, dynamic=True)
    # (3, 5) captures; (4, 5) and (9, 5) change dim 0 only; (4, 6) changes the static dim 1.
    frames, instances = _count(_rows, make, [(3, 5), (4, 5), (9, 5), (4, 6)], compiled=compiled)
    assert (frames, instances) == (2, 2)


# Every way a trace can read a size (CaptureResult::reads_sizes): a read that did not set the
# flag would bake the first call's size into a graph served to every size. Each reader's number
# grows with dim 0 and feeds only size-generic ops, so a missed read gives a wrong answer.
def _helper_rows(t):
    return t.shape[0]


_SIZE_READERS = {
    "shape": lambda x: x.shape[0],
    "getattr_shape": lambda x: getattr(x, "shape")[0],  # noqa: B009
    "size": lambda x: x.size()[0],
    "size_dim": lambda x: x.size(0),
    "size_negative_dim": lambda x: x.size(-2),
    "numel": lambda x: x.numel(),
    "nelement": lambda x: x.nelement(),
    "torch_numel": lambda x: torch.numel(x),
    "stride": lambda x: x.t().stride(1) + x.stride(0),
    "len": lambda x: len(x),
    "nbytes": lambda x: x.nbytes,
    "iteration": lambda x: sum(1 for _ in x),
    "unpacking": lambda x: len([*x]),
    "comprehension": lambda x: sum([x.size(d) for d in range(x.dim())]),
    "inlined_helper": _helper_rows,
    "shape_tuple_math": lambda x: x.shape[0] * x.shape[1] - x.shape[1],
}


# Readers whose int the interpreter carries as a symbolic size (test_sym_sizes.py): the entry
# stays size-generic and every new size re-evaluates the expression. The others pin the size.
_SYMBOLIC_READERS = {
    "shape", "getattr_shape", "size", "size_dim", "size_negative_dim", "numel", "len",
    "inlined_helper", "shape_tuple_math",
}  # fmt: skip


@pytest.mark.parametrize("reader", sorted(_SIZE_READERS))
def test_every_size_read_is_right_at_every_size(reader):
    read = _SIZE_READERS[reader]

    def fn(x):
        return x * 2 + read(x)

    # _count checks every size against eager: a read neither pinned nor carried symbolically
    # would serve the first size's number to the others.
    frames, instances = _count(fn, lambda n: (torch.randn(n, 3),), [4, 9, 6, 13], dynamic=True)
    if reader in _SYMBOLIC_READERS:
        assert instances >= 1, (reader, frames, instances)
    else:
        assert instances == 0, (reader, frames, instances)


def test_the_size_readers_harness_shares_an_entry_when_no_size_is_read():
    # The control for the test above: the same function with a constant shares one entry.
    def fn(x):
        return x * 2 + 3

    frames, instances = _count(fn, lambda n: (torch.randn(n, 3),), [4, 9, 6], dynamic=True)
    assert (frames, instances) == (1, 2)


def _reshaped_logits(x):
    # NOTE: a pointwise producer before a reshape that merges axes, then a row reduction:
    # move_reshapes lets them fuse (passes/move_reshapes.h).
    return torch.log_softmax((x * 2 + 1).view(-1, x.shape[-1]), dim=-1)


def test_a_new_sizes_graph_fuses_as_a_static_compile_does():
    """A size-generic entry's graph for a new size is compiled for that layout only, so it gets
    the passes a static compile runs (move_reshapes): the same kernels a call."""

    def launches(compiled, x):
        with torch.no_grad():
            compiled(x)
            before = torchlite.counters()["kernel_launches"]
            out = compiled(x)
        torch.testing.assert_close(out, _reshaped_logits(x), atol=1e-5, rtol=1e-5)
        return torchlite.counters()["kernel_launches"] - before

    x = torch.randn(2, 11, 24)
    torchlite.reset()
    static = launches(torchlite.compile(_reshaped_logits, dynamic=False), x)
    torchlite.reset()
    compiled = torchlite.compile(_reshaped_logits)
    with torch.no_grad():
        for t in (5, 7):
            compiled(torch.randn(2, t, 24))
    before = torchlite.counters()
    generic = launches(compiled, x)
    after = torchlite.counters()
    assert after["frames"] == before["frames"]  # served without a capture
    assert after["size_instances"] == before["size_instances"] + 1
    assert generic == static


def _zeros_of_a_size(x):
    return torch.zeros(x.shape[0], 4)


def _full_of_a_size_beside_a_kernel(x):
    n = x.shape[0]
    return torch.full((n, 2), n), torch.arange(n) * 2, x + 1


def _ones_live_at_a_break(x):
    t = torch.ones(x.shape[0], 3)
    print(end="")
    return t * 2


@pytest.mark.parametrize(
    "fn", [_zeros_of_a_size, _full_of_a_size_beside_a_kernel, _ones_live_at_a_break]
)
def test_a_factory_result_of_input_sizes_handed_on_stays_generic(fn):
    # before: a factory's result computed from constants and sizes (capture/constant_fold.h)
    # pinned its sizes where it was returned or live at a break: s0 == n, a capture per size
    torchlite.reset()
    compiled = torchlite.compile(fn)
    frames = []
    for n in [3, 5, 7, 9, 11]:
        x = torch.randn(n, 3)
        before = torchlite.counters()["frames"]
        torch.testing.assert_close(compiled(x), fn(x))
        frames.append(torchlite.counters()["frames"] - before)
    assert frames[0] > 0 and sum(frames[2:]) == 0, frames
