"""CUDA compiler benchmark: eager vs torchlite vs torch.compile (inductor), one process.

For each case: the median GPU time per call (CUDA events around 20 back-to-back calls, after
warmup; eager, torchlite and inductor sampled in turn, 7 rounds), the ratios, and the cold compile time (first call, from empty in-memory and on-disk
caches) of torchlite and inductor. The pointwise case also prints its achieved bandwidth next
to a device-to-device copy of the same size.

    python bench/gpu.py [--quick] [--skip-inductor] [--only NAME] [--profile-cold]
    python bench/gpu.py --kernels [--only NAME] [--dynamic]

--kernels: single kernels instead (add + layer_norm over 4096 rows 768, 1024 and 4096 wide, the
GELU-tanh of GPT-2's MLP, bf16 and f32), each system's calls captured in a CUDA graph and timed
by replaying it (GPU time only: a 10 us kernel is shorter than a call's host work), over enough
input sets in turn that they do not stay in L2; prints us per call and GB/s moved. --dynamic adds
torchlite with dynamic=True (runtime-size kernels: what a new length runs) next to its static
compile.

--quick uses smaller sizes (a smoke run); the numbers in the README come from the full run.
--profile-cold prints where each torchlite cold call spends its time (cProfile, which slows
the Python parts: its cold times are not the ones to report).

NOTE: the CUDA issue names this bench/cuda.py; a cuda.py here would shadow NVIDIA's `cuda`
package (torch.cuda imports cuda.bindings) for every script run from bench/.
"""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time

# NOTE: cold compiles need empty caches for both compilers, chosen before torch is imported.
_tmp = tempfile.mkdtemp(prefix="tl_bench_")
os.environ["TORCHLITE_CACHE_DIR"] = os.path.join(_tmp, "torchlite")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_tmp, "inductor")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from timing import cuda_ms

import torchlite

BF16 = torch.bfloat16


def pointwise(x):
    return torch.sigmoid(x * 2 + 1).relu() * x - torch.tanh(x)


def softmax_ln(x, w, b):
    return F.layer_norm(torch.softmax(x * 0.125, -1) + x, x.shape[-1:], w, b)


def gpu_ms(fn, args, iters=20, repeats=5, warmup=3):
    """Median over `repeats` of the mean time of `iters` back-to-back calls."""
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        times.append(cuda_ms(fn, args, iters))
    return statistics.median(times)


def interleaved_ms(fns, args, rounds=7, iters=20):
    """Median per function of `rounds` samples taken in turn (eager, torchlite, inductor, eager,
    ...): the GPU machine's host speed drifts by up to 2x over seconds, and host-bound models
    follow it, so measuring each function in its own block compared different moments."""
    for fn in fns:
        for _ in range(3):
            fn(*args)
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            samples[i].append(gpu_ms(fn, args, iters=iters, repeats=1, warmup=0))
    return [statistics.median(s) for s in samples]


def first_call_s(fn, args, profile=False):
    torch.cuda.synchronize()
    prof = cProfile.Profile() if profile else None
    t = time.perf_counter()
    if prof:
        prof.enable()
    fn(*args)
    torch.cuda.synchronize()
    if prof:
        prof.disable()
    dt = time.perf_counter() - t
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
    return dt


def copy_gbps(n):
    src, dst = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    ms = gpu_ms(lambda: dst.copy_(src), (), iters=50)
    return 2 * n * 4 / ms / 1e6


def model_cases(quick):
    cases = []
    batch = 8 if quick else 64
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
        import timm

        for name in ("resnet50", "vit_base_patch16_224"):
            torch.manual_seed(0)
            m = timm.create_model(name, pretrained=False).eval().to("cuda", BF16)
            x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=BF16)
            cases.append((f"{name} b{batch} bf16", m, (x,)))
    except Exception as e:  # noqa: BLE001
        print(f"# timm models skipped: {e}")
    try:
        import transformers

        torch.manual_seed(0)
        m = transformers.BertModel(transformers.BertConfig()).eval().to("cuda", BF16)
        b, s = (2, 128) if quick else (16, 512)
        cases.append(
            (f"BERT-base {b}x{s} bf16", m, (torch.randint(0, 30522, (b, s), device="cuda"),))
        )
        m = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval().to("cuda", BF16)
        b, s = (2, 128) if quick else (8, 512)
        cases.append((f"GPT-2 {b}x{s} bf16", m, (torch.randint(0, 50257, (b, s), device="cuda"),)))
    except Exception as e:  # noqa: BLE001
        print(f"# transformers models skipped: {e}")
    return cases


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    if hasattr(out, "logits"):
        return out.logits
    return first_tensor(out[0])


def rel_err(a, e):
    a, e = first_tensor(a).float(), first_tensor(e).float()
    return ((a - e).norm() / e.norm().clamp_min(1e-6)).item()


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


def add_layer_norm(x, r, w, b):
    h = x + r
    return h, F.layer_norm(h, x.shape[-1:], w, b)


class ScaledSoftmax(torch.nn.Module):
    """softmax(x * w) over a parameter's width: under dynamic=True the row's length is a model
    constant (ir::Kernel::static_axes), so the runtime-size kernel keeps the static schedule."""

    def __init__(self, width, dtype):
        super().__init__()
        self.w = torch.nn.Parameter(
            torch.randn(width, device="cuda", dtype=dtype), requires_grad=False
        )

    def forward(self, x):
        return torch.softmax(x * self.w, -1)


def graph_ms(fn, arg_sets):
    """GPU ms per call of `fn` over `arg_sets` in turn: the calls captured in one CUDA graph
    (after warm-up calls that compile), replayed 10 times back to back by cuda_ms."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for args in arg_sets:
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args in arg_sets:
            fn(*args)
    graph.replay()
    return cuda_ms(graph.replay, (), iters=10) / len(arg_sets)


def kernel_cases(only):
    """(name, fn, make_args, bytes moved a call)."""
    cases = []
    for dtype in (BF16, torch.float32):
        t = "bf16" if dtype == BF16 else "f32"
        e = torch.finfo(dtype).bits // 8
        for width in (768, 1024, 4096):

            def make(width=width, dtype=dtype):
                x, r = (torch.randn(4096, width, device="cuda", dtype=dtype) for _ in range(2))
                w, b = (torch.randn(width, device="cuda", dtype=dtype) for _ in range(2))
                return x, r, w, b

            cases.append((f"add+LN 4096x{width} {t}", add_layer_norm, make, 4 * 4096 * width * e))
        cases.append(
            (
                f"softmax(x*w) 4096x768 {t}",
                ScaledSoftmax(768, dtype),
                lambda dtype=dtype: (torch.randn(4096, 768, device="cuda", dtype=dtype),),
                2 * 4096 * 768 * e,
            )
        )
        n = 8 * 512 * 3072
        cases.append(
            (
                f"GELU-tanh 4096x3072 {t}",
                gelu_tanh,
                lambda dtype=dtype: (torch.randn(4096, 3072, device="cuda", dtype=dtype),),
                2 * n * e,
            )
        )
    return [c for c in cases if only in c[0]]


def kernel_table(only, skip_inductor, dynamic=False, rounds=5):
    print(
        f"{'kernel':26} {'eager us':>9} {'torchlite':>10} {'inductor':>9} {'ind/tl':>7}"
        f" {'tl GB/s':>8} {'ind GB/s':>9} {'tl err':>8}"
        + (f" {'tl dyn us':>10}" if dynamic else ""),
        flush=True,
    )
    with torch.no_grad():
        for name, fn, make, nbytes in kernel_cases(only):
            # NOTE: input sets in turn, past 2x the largest L2 (H200: 60 MB), so each call reads
            # its inputs from memory as a model's kernels mostly do.
            sets = [make() for _ in range(max(2, -(-256 * 2**20 // nbytes)))]
            torchlite.reset()
            fns = [fn, torchlite.compile(fn, fullgraph=True)]
            fns.append(torch.compile(fn, fullgraph=True) if not skip_inductor else None)
            if dynamic:
                fns.append(torchlite.compile(fn, fullgraph=True, dynamic=True))
            err = rel_err(fns[1](*sets[0]), fn(*sets[0]))
            samples = [[] for _ in fns]
            for _ in range(rounds):  # in turns: clocks drift
                for i, f in enumerate(fns):
                    if f is not None:
                        samples[i].append(graph_ms(f, sets))
            us = [statistics.median(s) * 1e3 if s else float("nan") for s in samples]
            eager, tl_us, ind_us = us[:3]
            print(
                f"{name:26} {eager:9.1f} {tl_us:10.1f} {ind_us:9.1f} {ind_us / tl_us:6.2f}x"
                f" {nbytes / tl_us / 1e3:8.0f} {nbytes / ind_us / 1e3:9.0f} {err:8.1e}"
                + (f" {us[3]:10.1f}" if dynamic else ""),
                flush=True,
            )
            torch._dynamo.reset()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-inductor", action="store_true")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--profile-cold", action="store_true", help="cProfile torchlite's cold calls")
    ap.add_argument("--kernels", action="store_true", help="single kernels (see the docstring)")
    ap.add_argument("--dynamic", action="store_true", help="--kernels: also torchlite dynamic=True")
    a = ap.parse_args()
    if a.kernels:
        props = torch.cuda.get_device_properties(0)
        print(f"torch {torch.__version__}, {props.name}, {props.multi_processor_count} SMs")
        kernel_table(a.only, a.skip_inductor, a.dynamic)
        return
    n = 1 << (22 if a.quick else 26)
    rows = 1024 if a.quick else 8192
    x = torch.randn(n, device="cuda")
    m = torch.randn(rows, 4096, device="cuda", dtype=BF16)
    w = torch.randn(4096, device="cuda", dtype=BF16)
    b = torch.randn(4096, device="cuda", dtype=BF16)
    cases = [
        (f"pointwise {n >> 20}M f32", pointwise, (x,)),
        (f"softmax+LN {rows}x4096 bf16", softmax_ln, (m, w, b)),
    ] + model_cases(a.quick)
    cases = [c for c in cases if a.only in c[0]]
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__}, {props.name}, {props.multi_processor_count} SMs")
    copy = copy_gbps(n)
    print(f"device-to-device copy of {n >> 20}M f32: {copy:.0f} GB/s (read + write)")
    head = (
        f"{'case':28} {'eager ms':>9} {'torchlite':>10} {'inductor':>9} {'eager/tl':>9}"
        f" {'ind/tl':>7} {'tl cold s':>9} {'ind cold s':>10} {'tl err':>8}"
    )
    print(head, flush=True)
    with torch.no_grad():
        for name, fn, args in cases:
            fn(*args)
            torchlite.reset()
            tl = torchlite.compile(fn)
            tl_cold = first_call_s(tl, args, a.profile_cold)
            err = rel_err(tl(*args), fn(*args))
            ind_ms = ind_cold = float("nan")
            if a.skip_inductor:
                eager, tl_ms = interleaved_ms([fn, tl], args)
            else:
                ind = torch.compile(fn)
                ind_cold = first_call_s(ind, args)
                eager, tl_ms, ind_ms = interleaved_ms([fn, tl, ind], args)
                torch._dynamo.reset()
            print(
                f"{name:28} {eager:9.3f} {tl_ms:10.3f} {ind_ms:9.3f} {eager / tl_ms:8.2f}x"
                f" {ind_ms / tl_ms:6.2f}x {tl_cold:9.2f} {ind_cold:10.2f} {err:8.1e}",
                flush=True,
            )
            if name.startswith("pointwise"):
                gbps = 2 * n * 4 / tl_ms / 1e6
                print(f"  torchlite pointwise: {gbps:.0f} GB/s = {100 * gbps / copy:.0f}% of copy")
    print("kernels compiled by torchlite:", torchlite.counters()["kernels"])


if __name__ == "__main__":
    main()
