"""The CUDA code generator without a GPU: every OpInfo parity case (test_opinfo_parity.py's ops,
dtypes and samples, plus float16) that torchlite fuses into kernels is emitted as CUDA C and
compiled by NVRTC to PTX for compute_90, which must succeed and define each kernel's entries.
Identical kernels (same source) compile once; several kernels share one NVRTC program and programs
compile on a thread pool (NVRTC releases the GIL). Skips only when NVRTC cannot be loaded."""

import concurrent.futures
import os
import re

import pytest
import torch
from helpers import nvrtc_missing
from opinfo_parity import DTYPES, MAX_SAMPLES, VIEW_OPS, _as_user_function, lowered_opinfos, op_id

import torchlite
from torchlite import _C

ARCH = "compute_90"


_MISSING = nvrtc_missing()
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"NVRTC not loadable: {_MISSING}")

OPS = lowered_opinfos()
CUDA_DTYPES = DTYPES + (torch.float16,)
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
_COMPILED: dict[str, str] = {}  # source -> "" (compiled) or the error


def _kernel_sources(op, sample, consumer):
    """(name, source, launch) of every kernel of every graph the case captures."""
    fn = _as_user_function(op.op)
    if consumer:
        view = fn
        fn = lambda *a, **k: view(*a, **k) * 2
    args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
    torchlite.reset()
    with torch.no_grad():
        try:
            graphs = torchlite.explain(lambda *a, **k: fn(*a, **k))(*args, **kwargs).graphs
        except Exception:  # noqa: BLE001 - capture failures are the parity suite's business
            return []
    out = []
    for g in graphs:
        for name, source, _, launch in _C.cuda_kernel_sources(g, ARCH, compile=False):
            out.append((name, source, launch))
    return out


def _fast_options() -> list[str]:
    """NVRTC >= 12.8 can skip most of its back-end optimisation: the source is what is under
    test here (tests/cpp/codegen/cuda_emitter_test.cpp compiles with full optimisation)."""
    if _MISSING:
        return []
    try:
        _C.nvrtc_compile('extern "C" __global__ void k() {}', "k", ARCH, FAST)
    except ValueError:
        return []
    return FAST


FAST = ["--Ofast-compile=max"]
OPTIONS = _fast_options()
BATCH = 16  # kernels per NVRTC program: the shared prelude is parsed once


def _entries(source: str, name: str, launch: dict, tag: str) -> tuple[str, list[str]]:
    """The kernel's text after the prelude, entry points renamed with `tag`."""
    body = source[source.index('extern "C"') :]
    names = [n for n in (name, launch["vector_name"]) if n]
    for n in sorted(names, key=len, reverse=True):
        body = re.sub(rf"\b{n}\(", f"{n}{tag}(", body)
    return body, [n + tag for n in names]


def _compile_one(name: str, source: str, launch: dict) -> str:
    try:
        ptx = _C.nvrtc_compile(source, name, ARCH, OPTIONS).decode()
    except Exception as e:  # noqa: BLE001 - reported with the case
        return f"{type(e).__name__}: {e}"
    missing = [n for n in (name, launch["vector_name"]) if n and f".entry {n}(" not in ptx]
    return f"PTX has no entry {missing}" if missing else ""


def _compile_batch(kernels: list) -> list[str]:
    """One NVRTC program for several kernels; on an error each is compiled alone to say which."""
    prelude = kernels[0][1][: kernels[0][1].index('extern "C"')]
    bodies, entries = [], []
    for j, (name, source, launch) in enumerate(kernels):
        if source[: len(prelude)] != prelude:
            return [_compile_one(*k) for k in kernels]
        body, names = _entries(source, name, launch, f"_b{j}")
        bodies.append(body)
        entries.append(names)
    try:
        ptx = _C.nvrtc_compile(prelude + "\n".join(bodies), "batch", ARCH, OPTIONS).decode()
    except ValueError:
        return [_compile_one(*k) for k in kernels]
    return [
        "" if all(f".entry {n}(" in ptx for n in names) else f"PTX has no entry {names}"
        for names in entries
    ]


def _cases(op):
    supported = op.supported_dtypes("cpu")
    for dtype in CUDA_DTYPES:
        if dtype not in supported:
            continue
        try:
            samples = list(op.sample_inputs("cpu", dtype))[:MAX_SAMPLES]
        except Exception:  # noqa: BLE001, S112 - some OpInfos have no CPU float16 samples
            continue
        variants = (False, True) if op.name in VIEW_OPS else (False,)
        for i, sample in enumerate(samples):
            for consumer in variants:
                yield f"{str(dtype).removeprefix('torch.')} sample {i}", sample, consumer


@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_fused_kernels_compile_to_ptx(op):
    pending, where = {}, {}
    for label, sample, consumer in _cases(op):
        for name, source, launch in _kernel_sources(op, sample, consumer):
            where.setdefault(source, f"{label} kernel {name}")
            if source not in _COMPILED:
                pending[source] = (name, source, launch)
    batches = [list(pending)[i : i + BATCH] for i in range(0, len(pending), BATCH)]
    futures = [_POOL.submit(_compile_batch, [pending[src] for src in b]) for b in batches]
    for b, fut in zip(batches, futures):
        for src, err in zip(b, fut.result()):
            _COMPILED[src] = err
    failures = [f"{where[s]}: {_COMPILED[s]}" for s in where if _COMPILED[s]]
    assert not failures, f"{op_id(op)}: {len(failures)} kernel(s) failed:\n" + "\n\n".join(
        f[:4000] for f in failures[:3]
    )


def test_a_softmax_graph_gives_one_reduction_kernel_with_ptx():
    def fn(x):
        return torch.softmax(x * 2, -1)

    g = torchlite.explain(fn)(torch.randn(8, 300)).graphs[0]
    (kernel,) = _C.cuda_kernel_sources(g, ARCH)
    name, source, ptx, launch = kernel
    assert "__shfl_xor_sync" in source
    assert f".entry {name}(".encode() in ptx
    assert launch["block"] > 0 and launch["grid"] > 0


def test_a_compile_error_carries_nvrtc_log_and_numbered_source():
    with pytest.raises(ValueError, match=r"(?s)kernel bad.*no_such_fn.*   1  extern"):
        _C.nvrtc_compile('extern "C" __global__ void bad() { no_such_fn(); }', "bad", ARCH)
