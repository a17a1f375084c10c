"""generate()'s cost per new token: eager vs torchlite [vs torch.compile], interleaved.

The decode loop of a tiny model is host-bound, so the per-token time is what each kind spends
on the host per call (guards, finding the compiled graph, launches, extern calls) plus
transformers' own loop. Per token = (generate(32 new) - generate(2 new)) / 30, the minimum over
rounds (the kinds take turns within a round, so a loaded machine slows them alike), plus what
torchlite ran per token (cache hits, kernel launches, eager fallbacks).

    python bench/generate_steps.py [--device cuda] [--layers 2] [--rounds 8] [--torch-compile]
                                   [--models gpt2,llama] [--caches dynamic,static] [--threads 1]
"""

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dynamic as bench_dynamic

import torchlite


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--torch-compile", action="store_true")
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--caches", default="dynamic,static")
    p.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    names = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
    models = bench_dynamic.make_decoders(a.layers, a.device)
    ids = torch.randint(1, 1000, (1, 16), device=a.device)
    print(f"per new token (ms), device {a.device}, {a.layers} layers, min of {a.rounds} rounds")
    for short in a.models.split(","):
        model = models[names[short]]
        for cache in a.caches.split(","):
            # NOTE: disable_compile: transformers would torch.compile a static cache's forward.
            kw = {
                "do_sample": False,
                "pad_token_id": 0,
                "eos_token_id": None,
                "disable_compile": True,
            }
            if cache == "static":
                kw["cache_implementation"] = "static"
            torchlite.reset()
            kinds = {"eager": model, "torchlite": torchlite.compile(model)}
            if a.torch_compile:
                torch._dynamo.reset()
                kinds["torch.compile"] = copy.deepcopy(model)
                kinds["torch.compile"].compile()

            def gen(m, n, kw=kw):
                start = time.perf_counter()
                out = m.generate(ids, max_new_tokens=n, **kw)
                bench_dynamic.sync(a.device)
                return time.perf_counter() - start, out

            with torch.no_grad():
                expected = gen(model, 32)[1]
                same = {}
                for k, m in kinds.items():
                    gen(m, 2)
                    same[k] = torch.equal(gen(m, 32)[1], expected)
                long = {k: [] for k in kinds}
                short_ = {k: [] for k in kinds}
                for _ in range(a.rounds):
                    for k, m in kinds.items():
                        long[k].append(gen(m, 32)[0])
                        short_[k].append(gen(m, 2)[0])
                before = torchlite.counters()
                gen(kinds["torchlite"], 32)
                after = torchlite.counters()
            per = {
                c: (after[c] - before[c]) / 32
                for c in ("cache_hits", "kernel_launches", "eager_fallbacks", "size_instances")
            }
            for k in kinds:
                ms = (min(long[k]) - min(short_[k])) / 30 * 1e3
                note = (
                    ""
                    if k != "torchlite"
                    else "  per call: " + ", ".join(f"{c} {v:g}" for c, v in per.items())
                )
                print(
                    f"  {names[short]:<17} {cache:<8} {k:<14} {ms:7.3f} ms/token   "
                    f"tokens {'equal' if same[k] else 'DIFFER'}{note}"
                )


if __name__ == "__main__":
    main()
