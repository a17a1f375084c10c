"""Changing sequence lengths: eager vs torchlite (dynamic=False, default) [vs torch.compile].

One process, CPU by default. A small GPT-2 (transformers) runs a sweep of sequence lengths in a
row (first calls included), then a length never seen: its first call and its steady per-call
time. torchlite's default compiles kernels that take their sizes at run time once a frame
recompiles (docs/internals/dynamic-shapes.md), so later lengths reuse them.

A second section runs a feed-forward block that reads no size (Linear, GELU, LayerNorm,
Linear): its second capture serves every later length from one cache entry (layer 2's
size-generic entries), so "captures" stays at 2 for the sweep.

A third section runs a nanoGPT-style model that reads sizes (`B, T, C = x.size()`, views,
`arange(T)`, a causal mask sliced by T): symbolic sizes keep it at 2 captures.

A fourth section (`generate`) runs transformers' generate() (greedy, 32 new tokens) of a small
GPT2LMHeadModel and LlamaForCausalLM with the dynamic KV cache and with StaticCache: the first
generate() (captures included) and a second one, captures, and whether the tokens equal eager's.

    python bench/dynamic.py [--layers 2] [--lengths 37,61,...] [--torch-compile] [--device cuda]
                            [--sections hf,block,nanogpt,generate] [--dtype bfloat16]
                            [--n-embd 128] [--batch 2] [--no-static-sweep]

Columns: the sweep's wall time (first calls included), the unseen length's first call and its
steady time (median of 10), LLVM kernels and CUDA programs (NVRTC) compiled in the sweep plus the
unseen length, and captures (torchlite frames). `--no-static-sweep` skips torchlite's
dynamic=False sweep (a compile per length: slow); "torchlite static (unseen)" is compiled for the
unseen length alone, the steady-state reference.
"""

import argparse
import os
import statistics
import sys
import time

import torch

import torchlite

DTYPE = torch.float32


def make_model(layers: int, device: str, n_embd: int = 128):
    # NOTE: the torchvision workaround is shared with the tests (bench/model_corpus.py does the same).
    sys.path.append(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
    )
    from torchvision_compat import work_around_mismatched_torchvision

    work_around_mismatched_torchvision()
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(
        n_layer=layers,
        n_embd=n_embd,
        n_head=max(4, n_embd // 64),
        vocab_size=1000,
        n_positions=1024,
    )
    return GPT2Model(cfg).eval().to(device=device, dtype=DTYPE)


def make_block(device: str):
    return (
        torch.nn.Sequential(
            torch.nn.Linear(128, 512),
            torch.nn.GELU(),
            torch.nn.LayerNorm(512),
            torch.nn.Linear(512, 128),
        )
        .eval()
        .to(device)
    )


class NanoGPT(torch.nn.Module):
    """A GPT-2 written as nanoGPT does: it reads sizes (`B, T, C = x.size()`), builds views
    from them, slices a causal mask by T and takes positions from arange(T). Symbolic sizes
    (layer 2) keep one size-generic entry for it."""

    def __init__(self, layers=2, c=128, nh=4, block=512, vocab=1000):
        super().__init__()
        self.nh = nh
        self.wte = torch.nn.Embedding(vocab, c)
        self.wpe = torch.nn.Embedding(block, c)
        self.ln = torch.nn.ModuleList(torch.nn.LayerNorm(c) for _ in range(2 * layers + 1))
        self.attn = torch.nn.ModuleList(torch.nn.Linear(c, 3 * c) for _ in range(layers))
        self.proj = torch.nn.ModuleList(torch.nn.Linear(c, c) for _ in range(layers))
        self.mlp = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Linear(c, 4 * c), torch.nn.GELU(), torch.nn.Linear(4 * c, c)
            )
            for _ in range(layers)
        )
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, idx):
        _, t = idx.size()
        x = self.wte(idx) + self.wpe(torch.arange(0, t, device=idx.device))
        for i in range(len(self.attn)):
            h = self.ln[2 * i](x)
            B, T, C = h.size()
            q, k, v = self.attn[i](h).split(C, dim=2)
            q = q.view(B, T, self.nh, C // self.nh).transpose(1, 2)
            k = k.view(B, T, self.nh, C // self.nh).transpose(1, 2)
            v = v.view(B, T, self.nh, C // self.nh).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (k.size(-1) ** -0.5)
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj[i](y)
            x = x + self.mlp[i](self.ln[2 * i + 1](x))
        return self.ln[-1](x)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, ids, device) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        fn(ids)
    sync(device)
    return time.perf_counter() - start


def run(name, fn, lengths, unseen, batch, device, llvm=None, make=None):
    make = make or (lambda n: torch.randint(0, 1000, (batch, n), device=device))
    ids = {n: make(n) for n in [*lengths, unseen]}
    before = torchlite._C.llvm_compiles()
    nvrtc = torchlite.counters()["nvrtc_compiles"]
    frames = torchlite.counters()["frames"]
    sweep = sum(timed(fn, ids[n], device) for n in lengths)
    first = timed(fn, ids[unseen], device)
    steady = statistics.median(timed(fn, ids[unseen], device) for _ in range(10))
    compiles = torchlite._C.llvm_compiles() - before
    nvrtc = torchlite.counters()["nvrtc_compiles"] - nvrtc
    frames = torchlite.counters()["frames"] - frames
    print(
        f"{name:<28} sweep {sweep:8.2f} s   unseen first {first * 1e3:9.1f} ms   "
        f"steady {steady * 1e3:8.2f} ms   llvm kernels {compiles}   nvrtc {nvrtc}   "
        f"captures {frames}",
        flush=True,
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--lengths", default="37,61,88,101,127,150,173,199,230,255,301,340")
    p.add_argument("--unseen", type=int, default=211)
    p.add_argument("--device", default="cpu")
    p.add_argument("--torch-compile", action="store_true")
    p.add_argument("--sections", default="hf,block,nanogpt,generate", help="which sections to run")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--dtype", default="float32", help="of the models' weights and inputs")
    p.add_argument("--n-embd", type=int, default=128, help="GPT-2 section's hidden size")
    p.add_argument("--no-static-sweep", action="store_true", help="skip dynamic=False sweeps")
    a = p.parse_args()
    global DTYPE
    DTYPE = getattr(torch, a.dtype)
    print(
        f"device {a.device} ({torch.cuda.get_device_name() if a.device == 'cuda' else 'CPU'}), "
        f"{a.dtype}, batch {a.batch}, layers {a.layers}, lengths {a.lengths}, unseen {a.unseen}",
        flush=True,
    )
    lengths = [int(n) for n in a.lengths.split(",")]
    sections = a.sections.split(",")
    torch.manual_seed(0)
    if "hf" in sections:
        hf_section(a, lengths)
    if "block" in sections:
        block_section(a, lengths)
    if "nanogpt" in sections:
        nanogpt_section(a, lengths)
    if "generate" in sections:
        generate_section(a)


def nanogpt_section(a, lengths):
    print("nanoGPT-style model (reads sizes: views, arange, mask slices):")
    model = NanoGPT(a.layers).eval().to(device=a.device, dtype=DTYPE)
    run("eager", model, lengths, a.unseen, a.batch, a.device)
    for dynamic in (None,) if a.no_static_sweep else (False, None):
        torchlite.reset()
        compiled = torchlite.compile(model, dynamic=dynamic)
        run(f"torchlite dynamic={dynamic}", compiled, lengths, a.unseen, a.batch, a.device)
    torchlite.reset()
    static = torchlite.compile(model, dynamic=False)
    run("torchlite static (unseen)", static, [a.unseen], a.unseen, a.batch, a.device)
    if a.torch_compile:
        run("torch.compile", torch.compile(model), lengths, a.unseen, a.batch, a.device)


def hf_section(a, lengths):
    print(f"transformers GPT-2 (n_embd {a.n_embd}):")
    model = make_model(a.layers, a.device, a.n_embd)
    run("eager", model, lengths, a.unseen, a.batch, a.device)
    for dynamic in (None,) if a.no_static_sweep else (False, None):
        torchlite.reset()
        run(
            f"torchlite dynamic={dynamic}",
            torchlite.compile(model, dynamic=dynamic),
            lengths,
            a.unseen,
            a.batch,
            a.device,
        )
    torchlite.reset()
    static = torchlite.compile(model, dynamic=False)
    run("torchlite static (unseen)", static, [a.unseen], a.unseen, a.batch, a.device)
    if a.torch_compile:
        run("torch.compile", torch.compile(model), lengths, a.unseen, a.batch, a.device)


def block_section(a, lengths):
    block = make_block(a.device).to(DTYPE)
    print("feed-forward block (reads no size):")

    def make(n):
        return torch.randn(a.batch, n, 128, device=a.device, dtype=DTYPE)

    run("eager", block, lengths, a.unseen, a.batch, a.device, make=make)
    for dynamic in (None,) if a.no_static_sweep else (False, None):
        torchlite.reset()
        compiled = torchlite.compile(block, dynamic=dynamic)
        run(
            f"torchlite dynamic={dynamic}",
            compiled,
            lengths,
            a.unseen,
            a.batch,
            a.device,
            make=make,
        )

    # Layer 1 alone (a capture per new size, kernels shared): mark_static keeps the sizes exact.
    def make_static(n):
        x = make(n)
        torchlite.mark_static(x, [0, 1, 2])
        return x

    torchlite.reset()
    compiled = torchlite.compile(block)
    run("torchlite layer 1 only", compiled, lengths, a.unseen, a.batch, a.device, make=make_static)
    torchlite.reset()
    static = torchlite.compile(block, dynamic=False)
    run("torchlite static (unseen)", static, [a.unseen], a.unseen, a.batch, a.device, make=make)
    if a.torch_compile:
        run("torch.compile", torch.compile(block), lengths, a.unseen, a.batch, a.device, make=make)


def make_decoders(layers: int, device: str):
    make_model(layers, device)  # NOTE: the torchvision workaround, before transformers imports
    import transformers

    gpt2 = transformers.GPT2Config(
        n_layer=layers, n_embd=128, n_head=4, vocab_size=1000, n_positions=1024
    )
    llama = transformers.LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        max_position_embeddings=1024,
    )
    return {
        "GPT2LMHeadModel": transformers.GPT2LMHeadModel(gpt2).eval().to(device),
        "LlamaForCausalLM": transformers.LlamaForCausalLM(llama).eval().to(device),
    }


def generate_section(a):
    import copy

    print(f"generate(), greedy, {a.new_tokens} new tokens, prompt of 16 (first / second call):")
    for name, model in make_decoders(a.layers, a.device).items():
        ids = torch.randint(1, 1000, (1, 16), device=a.device)
        for cache in ("dynamic", "static"):
            # NOTE: disable_compile: transformers would torch.compile a static cache's forward
            # itself on a GPU.
            kw = {"max_new_tokens": a.new_tokens, "do_sample": False, "pad_token_id": 0}
            kw.update(eos_token_id=None, disable_compile=True)
            if cache == "static":
                kw["cache_implementation"] = "static"

            def gen(m, kw=kw, ids=ids):
                start = time.perf_counter()
                with torch.no_grad():
                    out = m.generate(ids, **kw)
                sync(a.device)
                return out, time.perf_counter() - start

            expected, eager_first = gen(model)
            eager = statistics.median(gen(model)[1] for _ in range(3))
            rows = [("eager", eager_first, eager, "", True)]
            torchlite.reset()
            frames = torchlite.counters()["frames"]
            compiled = torchlite.compile(model)
            out, first = gen(compiled)
            second = statistics.median(gen(compiled)[1] for _ in range(3))
            captures = torchlite.counters()["frames"] - frames
            rows.append(
                ("torchlite", first, second, f"captures {captures}", torch.equal(out, expected))
            )
            if a.torch_compile:
                torch._dynamo.reset()
                tc = copy.deepcopy(model)
                tc.compile()
                out, first = gen(tc)
                second = statistics.median(gen(tc)[1] for _ in range(3))
                rows.append(("torch.compile", first, second, "", torch.equal(out, expected)))
            for who, first, second, note, same in rows:
                print(
                    f"  {name:<17} {cache:<8} {who:<14} first {first * 1e3:9.1f} ms   "
                    f"second {second * 1e3:8.1f} ms   tokens {'equal' if same else 'DIFFER'}   "
                    f"{note}"
                )


if __name__ == "__main__":
    main()
