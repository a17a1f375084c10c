"""Shared test helpers: parity with eager through one `check`, counter deltas, line lookups.

Every capture test goes through `check`, so "compiled equals eager" is defined in one place:
same container types, same Python values, tensors equal within dtype tolerance with the same
dtype, device, shape and requires_grad.
"""

from __future__ import annotations

import collections
import copy
import functools
import inspect
import math
import os
import subprocess
import sys

import torch

import torchlite

COUNTER_KEYS = ("frames", "graphs", "graph_breaks", "recompiles", "cache_hits", "kernels")


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def _fresh_tensor(t: torch.Tensor) -> torch.Tensor:
    """A random tensor with the same shape, dtype, device and requires_grad as `t`.

    NOTE: value ranges follow the original so domain-restricted functions stay valid: integer
    tensors (often indices) stay inside [min, max], non-negative floats stay non-negative and
    strictly positive floats stay strictly positive (sqrt, log, division).
    """
    with torch.no_grad():
        if t.dtype == torch.bool:
            out = torch.rand(t.shape, device=t.device) > 0.5
        elif t.is_floating_point() or t.is_complex():
            out = torch.randn(t.shape, dtype=t.dtype, device=t.device)
            if t.numel() and bool((t >= 0).all()):
                out = out.abs()
                if bool((t > 0).all()):
                    out = out + 0.1
        else:
            lo, hi = (int(t.min()), int(t.max())) if t.numel() else (0, 0)
            out = torch.randint(lo, hi + 1, t.shape, dtype=t.dtype, device=t.device)
        # NOTE: a dense input keeps its layout (channels-last, transposed): its stride guards
        # still pass; empty_like gives other tensors contiguous strides, as before.
        out = torch.empty_like(t).copy_(out)
    return out.requires_grad_(t.requires_grad)


def fresh_like(value):
    """Recursively replaces every tensor in `value` with fresh random values of the same kind.

    Non-tensor leaves (ints, floats, strings, modules, None) are returned unchanged, so guards
    that depend on them still pass and the third `check` call must hit the cache.
    """
    if isinstance(value, torch.Tensor):
        return _fresh_tensor(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(fresh_like(v) for v in value)
    if isinstance(value, list):
        return [fresh_like(v) for v in value]
    if isinstance(value, dict):
        return {k: fresh_like(v) for k, v in value.items()}
    return value


def clone_args(value):
    """Deep-copies tensors (keeping requires_grad, leaf-ness) so eager and compiled runs each
    get their own inputs: in-place ops in the function under test must not leak across runs."""
    if isinstance(value, torch.Tensor):
        out = value.detach().clone()
        return out.requires_grad_(value.requires_grad)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(clone_args(v) for v in value)
    if isinstance(value, list):
        return [clone_args(v) for v in value]
    if isinstance(value, dict):
        return {k: clone_args(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------


def assert_same(actual, expected, *, atol=None, rtol=None, check_requires_grad=True, path="out"):
    """Deep equality between a compiled result and the eager one; `path` names the failing leaf."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a Tensor, got {type(actual)}"
        torch.testing.assert_close(
            actual.detach(),
            expected.detach(),
            atol=atol,
            rtol=rtol,
            equal_nan=True,
            msg=lambda m: f"{path}: {m}",
        )
        if check_requires_grad:
            assert actual.requires_grad == expected.requires_grad, (
                f"{path}: requires_grad {actual.requires_grad} != eager {expected.requires_grad}"
            )
        return
    assert type(actual) is type(expected), (
        f"{path}: type {type(actual).__name__} != eager {type(expected).__name__}"
    )
    if isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), f"{path}: keys differ"
        for k in expected:
            assert_same(
                actual[k],
                expected[k],
                atol=atol,
                rtol=rtol,
                check_requires_grad=check_requires_grad,
                path=f"{path}[{k!r}]",
            )
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(
                a,
                e,
                atol=atol,
                rtol=rtol,
                check_requires_grad=check_requires_grad,
                path=f"{path}[{i}]",
            )
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), f"{path}: {actual} != nan"
    else:
        assert actual == expected, f"{path}: {actual!r} != eager {expected!r}"


# ---------------------------------------------------------------------------------------------
# A backend= that checks the torch.fx graphs torchlite hands out
# ---------------------------------------------------------------------------------------------


def _example_clone(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    return value


def fx_checking_backend(gm, example_inputs, **options):
    """A torchlite `backend=` that fails unless the GraphModule is valid Python FX code.

    It regenerates the code (`recompile`), prints it, runs `forward` on copies of the example
    inputs (so in-place ops do not touch the real ones) and checks every output against the
    trace-time example value's shape and dtype; the compiled function then runs `forward`, so
    callers compare its values with eager. Graphs checked are counted in `fx_checking_backend.graphs`.
    """
    gm.recompile()
    gm.print_readable(print_output=False)
    grad_mode = torch.is_grad_enabled()
    try:
        outputs = gm.forward(*[_example_clone(v) for v in example_inputs])
    finally:
        # NOTE: a graph that ends inside `with torch.no_grad()` leaves grad mode switched off.
        torch.set_grad_enabled(grad_mode)
    assert isinstance(outputs, tuple), f"forward returned {type(outputs).__name__}, not a tuple"
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    for i, (out, arg) in enumerate(zip(outputs, output_node.args[0])):
        example = arg.meta.get("example_value") if hasattr(arg, "meta") else None
        if isinstance(example, torch.Tensor):
            assert isinstance(out, torch.Tensor), f"output {i}: {type(out).__name__}\n{gm.code}"
            assert (out.shape, out.dtype) == (example.shape, example.dtype), (
                f"output {i}: {out.dtype}{list(out.shape)} but traced as "
                f"{example.dtype}{list(example.shape)}\n{gm.code}"
            )
    fx_checking_backend.graphs += 1
    return gm.forward


fx_checking_backend.graphs = 0


# ---------------------------------------------------------------------------------------------
# Counters
# ---------------------------------------------------------------------------------------------


class at_least:
    """A lower bound for `assert_counters_delta`."""

    def __init__(self, n: int):
        self.n = n

    def ok(self, delta: int) -> bool:
        return delta >= self.n

    def __repr__(self) -> str:
        return f">= {self.n}"


def counters() -> dict:
    """A snapshot (copy) of torchlite's cumulative counters."""
    return dict(torchlite.counters())


def compiled_on_cuda(fn, *args, atol=None, rtol=None):
    """`fn` compiled (fullgraph, fresh caches) equals eager on two calls under no_grad on the GPU;
    returns the compiled function and how many kernels it compiled."""
    torchlite.reset()
    before = counters()["kernels"]
    compiled = torchlite.compile(fn, fullgraph=True)
    with torch.no_grad():
        expected = fn(*args)
        for _ in range(2):
            actual = compiled(*args)
            torch.cuda.synchronize()
            assert_same(actual, expected, atol=atol, rtol=rtol, check_requires_grad=False)
    return compiled, counters()["kernels"] - before


def one_graph_kernels(fn, *args):
    """`fn` compiled from fresh caches and called once: its result and the kernels it compiled;
    asserts the call made no graph break."""
    torchlite.reset()
    torchlite.reset_counters()
    out = torchlite.compile(fn)(*args)
    assert torchlite.counters()["graph_breaks"] == 0
    return out, torchlite.counters()["kernels"]


def close_for_dtype(out, expected):
    """assert_close at bfloat16's tolerance (2e-2) for bfloat16 results, else torch's default."""
    if expected.dtype == torch.bfloat16:
        torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    else:
        torch.testing.assert_close(out, expected)


def assert_counters_delta(before: dict, after: dict, **expected):
    """Asserts after[k] - before[k] for each keyword: an int is exact, `at_least(n)` a bound."""
    for key, want in expected.items():
        delta = after[key] - before[key]
        ok = want.ok(delta) if isinstance(want, at_least) else delta == want
        assert ok, (
            f"counter {key!r} grew by {delta}, expected {want!r} (before={before}, after={after})"
        )


# ---------------------------------------------------------------------------------------------
# The parity check
# ---------------------------------------------------------------------------------------------


def _call(fn, args, kwargs):
    args, kwargs = clone_args(args), clone_args(kwargs)
    return fn(*args, **kwargs), args, kwargs


def check(
    fn,
    *args,
    fullgraph=True,
    atol=None,
    rtol=None,
    fresh=True,
    cache_hit=True,
    check_requires_grad=True,
    **kwargs,
):
    """Compiles `fn` and checks it against eager: twice with `args`, once with `fresh_like(args)`.

    Each run gets its own clone of the inputs, and the inputs after the call are compared too
    (in-place updates must match). `kwargs` go to `fn`. With `cache_hit` the 2nd and 3rd calls
    must not capture again (same guards). Returns the compiled callable.
    """
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=fullgraph)
    tol = {"atol": atol, "rtol": rtol, "check_requires_grad": check_requires_grad}
    inputs = [(args, kwargs), (args, kwargs), (fresh_like(args), fresh_like(kwargs))]
    if not fresh:
        inputs.pop()
    after_first = None
    for i, (a, kw) in enumerate(inputs):
        expected, eager_args, eager_kwargs = _call(fn, a, kw)
        actual, comp_args, comp_kwargs = _call(compiled, a, kw)
        assert_same(actual, expected, path=f"call {i} out", **tol)
        assert_same(comp_args, eager_args, path=f"call {i} args after call", **tol)
        assert_same(comp_kwargs, eager_kwargs, path=f"call {i} kwargs after call", **tol)
        if i == 0:
            after_first = counters()
    if cache_hit:
        assert_counters_delta(after_first, counters(), graphs=0, frames=0, recompiles=0)
    return compiled


def check_module(module: torch.nn.Module, *args, fullgraph=True, atol=None, rtol=None, **kwargs):
    """`check` for a module whose forward has no side effects on its own state: compiled and
    eager run on separate deep copies, and the parameters/buffers are compared afterwards."""
    eager = copy.deepcopy(module)
    torchlite.reset()
    compiled = torchlite.compile(module, fullgraph=fullgraph)
    for i, a in enumerate([args, args, fresh_like(args)]):
        expected = eager(*clone_args(a), **kwargs)
        actual = compiled(*clone_args(a), **kwargs)
        assert_same(actual, expected, atol=atol, rtol=rtol, path=f"call {i} out")
    assert_state_equal(module, eager)
    return compiled


def assert_state_equal(actual: torch.nn.Module, expected: torch.nn.Module):
    """Parameters and buffers (running stats, counters) equal by name."""
    a, e = actual.state_dict(), expected.state_dict()
    assert list(a) == list(e)
    for k in e:
        assert_same(a[k], e[k], path=f"state[{k}]", check_requires_grad=False)


# ---------------------------------------------------------------------------------------------
# Source locations (break reports must point at the user's exact line)
# ---------------------------------------------------------------------------------------------


def lineno_of(fn, marker: str) -> int:
    """The absolute line number of the first source line of `fn` containing `marker`.

    Tests tag the line that should be reported with a comment (`# BREAK`) instead of
    hard-coding numbers, so editing the file never silently breaks them.
    """
    lines, start = inspect.getsourcelines(inspect.unwrap(fn))
    for offset, line in enumerate(lines):
        if marker in line:
            return start + offset
    raise AssertionError(f"marker {marker!r} not found in {fn.__qualname__}")


def filename_of(fn) -> str:
    return inspect.unwrap(fn).__code__.co_filename


def _output_scale(out) -> float:
    """The largest magnitude among the output's tensors (ModelOutput, tuple or tensor)."""
    if isinstance(out, torch.Tensor):
        return out.detach().abs().max().item() if out.numel() and out.is_floating_point() else 0.0
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return max((_output_scale(o) for o in out), default=0.0)
    return 0.0


def model_tolerance(expected) -> dict:
    """1e-4, the absolute part against the output's scale: inception_v3's random-weight logits
    reach 1e9, and a channels-last convolution (oneDNN's NHWC algorithm, which eager also runs
    for channels-last tensors) moves them by 2e-6 of that, as eager in that layout does."""
    return {"atol": 1e-4 * max(1.0, _output_scale(expected)), "rtol": 1e-4}


# ---------------------------------------------------------------------------------------------
# Subprocesses
# ---------------------------------------------------------------------------------------------


def run_python_process(
    script: str, env: dict, timeout: float = 120, args=(), umask: int | None = None
) -> subprocess.CompletedProcess:
    """Runs `script` with this interpreter in a fresh process under `env` (argv: `args`; umask
    set in the child when given); asserts exit code 0 (the failure shows the end of its
    stderr) and returns the finished process (text stdout and stderr)."""
    out = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def run_python(script: str, env: dict, timeout: float = 120) -> str:
    """`run_python_process`'s stdout."""
    return run_python_process(script, env, timeout).stdout


def aten_ops(fn, *args) -> collections.Counter:
    """How many times each aten op ran in `fn(*args)` (torch's profiler; synchronised on CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return collections.Counter(e.name for e in p.events() if e.name.startswith("aten::"))


@functools.cache
def nvrtc_missing() -> str:
    """Why NVRTC cannot be loaded here ("" when it can): CUDA source tests compile to PTX on
    machines without a GPU too."""
    from torchlite import _C

    try:
        _C.nvrtc_version()
    except Exception as e:  # noqa: BLE001 - the message says where NVRTC was searched
        return str(e)
    return ""


def flat_tensors(o) -> list:
    """The tensors of a model output (a tensor, a ModelOutput, nested tuples/lists), in order."""
    if isinstance(o, torch.Tensor):
        return [o]
    if hasattr(o, "to_tuple"):
        o = o.to_tuple()
    if isinstance(o, (tuple, list)):
        return [t for x in o for t in flat_tensors(x)]
    return []


def weight_copies_in_call(fn, x, weights) -> list:
    """The aten copies of tensors shaped like the k x k conv `weights` that one call of fn(x)
    runs (torch's per-call channels-last conversion appears as aten::clone inside
    aten::_convolution)."""
    from torch.profiler import ProfilerActivity, profile

    shapes = [list(w.shape) for w in weights if w.dim() == 4 and w.shape[2] * w.shape[3] > 1]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        fn(x)
        if x.is_cuda:
            torch.cuda.synchronize()
    return [
        e.name
        for e in p.events()
        if e.name in ("aten::clone", "aten::copy_") and e.input_shapes[:1][0] in shapes
    ]


def assert_training_step_matches(model, compiled, shape, dtype, steps=2):
    """Training steps of `compiled` (of `model`) against eager's on fresh inputs of `shape` and
    `dtype` on the model's device: the output, the input's and every parameter's gradient. In
    fp32 close to eager's (1e-4); in bf16/fp16 against a float64 run, in norm no farther from it
    than twice eager's own error plus 4% of its norm (a compiled form rounds elsewhere than
    eager, so eager is no reference: a pre-activation rounded once more, as in Inductor's
    bias-after-the-GEMM form, flips a ReLU's mask where it is within a rounding of zero, which
    moves that element's gradient by a whole term; over 8 seeds of a 3-layer ReLU MLP in bf16,
    eager's error was 0.5-3.9% of the gradient's norm, that form's 3.3-5.4%; 4% is the
    tolerance torch's benchmarks give bf16 training of some models, and a real mistake (a bias
    lost, a wrong saved value) is off by tens of percent)."""
    ref = copy.deepcopy(model).double()
    device = next(model.parameters()).device
    for _ in range(steps):
        x = torch.randn(*shape, dtype=dtype, device=device)
        runs = []
        for m, xd in ((model, x), (compiled, x), (ref, x.double())):
            for p in model.parameters():
                p.grad = None
            ref.zero_grad(set_to_none=True)
            xi = xd.detach().clone().requires_grad_()
            out = m(xi)
            (out.float() ** 2).sum().backward()
            params = ref.parameters() if m is ref else model.parameters()
            runs.append([out, xi.grad] + [p.grad.clone() for p in params])
        eager, got, exact = runs
        for i, (e, g, r) in enumerate(zip(eager, got, exact)):
            if dtype == torch.float32:  # cuBLAS may pick another algorithm for another form
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
            else:
                err, eager_err = (g.double() - r).norm(), (e.double() - r).norm()
                assert err <= 2 * eager_err + 4e-2 * r.norm(), (i, err, eager_err, r.norm())


def tiny_llama_config(transformers, **overrides):
    """The small Llama of the dynamic-shape tests: 2 layers, hidden 32 (4 heads of 8, 2 key/value
    heads), MLP 64, vocabulary 100, 64 positions; `overrides` replace any field."""
    fields = {
        "num_hidden_layers": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
        "max_position_embeddings": 64,
        **overrides,
    }
    return transformers.LlamaConfig(**fields)
