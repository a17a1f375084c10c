"""A new sequence length's cost on a frame that already has its size-generic entry.

A small transformers model (GPT-2 as bench/dynamic.py's hf section, or Llama, BERT), torchlite
default: a few lengths to get the size-generic entry, then N new lengths in a row, each called
twice. Prints the first call's time, the second call's (same length: no compile), their
difference (what a new length costs), the Python objects each new length leaves alive
(gc.get_objects() after a full collection, before and after the N lengths) and the cyclic
collections the N lengths started (count and time per generation). `TORCHLITE_LOGS=recompiles`
adds each instance's replay and compile times.

`--torch-compile` also runs eager and torch.compile (automatic dynamic shapes, its default) in
the same process, the three taking turns at each length (the load of a shared machine changes
within a run), and prints them side by side: a new length's first call, a second call at it,
and the difference.

    OMP_NUM_THREADS=1 python bench/dynamic_new_lengths.py [--n 40] [--layers 2] [--n-embd 128] \
        [--model gpt2|llama|bert] [--torch-compile]

On a shared, loaded machine OMP_NUM_THREADS=1 keeps OpenMP barriers (waiting for a descheduled
thread) out of the numbers: with 2 threads at load ~10 on 2 cores every call ran 3-6x slower,
eager too.
"""

import argparse
import gc
import os
import statistics
import sys
import time

import torch
from dynamic import make_model

import torchlite

WARM = (37, 61, 88)  # an exact entry, then the size-generic one (torch.compile: static, dynamic)


def make(kind: str, layers: int, n_embd: int):
    if kind == "gpt2":
        return make_model(layers, "cpu", n_embd)
    sys.path.append(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
    )
    from torchvision_compat import work_around_mismatched_torchvision

    work_around_mismatched_torchvision()
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

    heads = max(4, n_embd // 64)
    if kind == "llama":
        cfg = LlamaConfig(
            num_hidden_layers=layers,
            hidden_size=n_embd,
            intermediate_size=2 * n_embd,
            num_attention_heads=heads,
            num_key_value_heads=heads // 2,
            vocab_size=1000,
        )
        return LlamaModel(cfg).eval()
    cfg = BertConfig(
        num_hidden_layers=layers,
        hidden_size=n_embd,
        intermediate_size=2 * n_embd,
        num_attention_heads=heads,
        vocab_size=1000,
    )
    return BertModel(cfg).eval()


def sweep(fns, lengths, batch, note):
    """First and second call times (s) of each of `fns` (name -> callable) at each new length,
    after the warm-up lengths. The callables take turns at each length (the first to go
    rotates), so a change of the machine's load falls on all of them alike."""
    gen = torch.Generator().manual_seed(0)

    def ids(t):
        return torch.randint(0, 1000, (batch, t), generator=gen)

    names = list(fns)
    first = {k: [] for k in names}
    second = {k: [] for k in names}
    with torch.no_grad():
        for t in WARM:
            x = ids(t)
            for fn in fns.values():
                fn(x)
        note("begin")
        for i, t in enumerate(lengths):
            x = ids(t)
            for k in names[i % len(names) :] + names[: i % len(names)]:
                s = time.perf_counter()
                fns[k](x)
                first[k].append(time.perf_counter() - s)
                s = time.perf_counter()
                fns[k](x)
                second[k].append(time.perf_counter() - s)
        note("end")
    return [(k, first[k], second[k]) for k in names]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=40, help="new lengths")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--model", default="gpt2", choices=("gpt2", "llama", "bert"))
    p.add_argument("--torch-compile", action="store_true", help="eager and torch.compile too")
    a = p.parse_args()
    model = make(a.model, a.layers, a.n_embd)
    lengths = list(range(100, 100 + a.n))
    collections = []
    started = [0.0]
    objects = {}

    def on_gc(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collections.append((info["generation"], time.perf_counter() - started[0]))

    def note(at):
        if at == "end":
            gc.callbacks.remove(on_gc)  # NOTE: before the full collection that counts objects
        gc.collect()
        objects[at] = len(gc.get_objects())
        if at == "begin":
            gc.callbacks.append(on_gc)

    fns = {"torchlite": torchlite.compile(model)}
    if a.torch_compile:
        fns = {"eager": model, **fns, "torch.compile": torch.compile(model)}
    rows = sweep(fns, lengths, a.batch, note)
    c = torchlite.counters()

    def ms(v):
        return statistics.median(v) * 1e3

    print(
        f"{a.model}, {a.layers} layers, n_embd {a.n_embd}, batch {a.batch}, {a.n} new lengths "
        f"({lengths[0]}..{lengths[-1]}) after {WARM}, median ms:"
    )
    print(
        f"{'':<14} {'first call':>11} {'second call':>12} {'new length costs':>17} {'max first':>10}"
    )
    for name, f, s in rows:
        cost = statistics.median(x - y for x, y in zip(f, s)) * 1e3
        print(f"{name:<14} {ms(f):11.1f} {ms(s):12.1f} {cost:17.1f} {max(f) * 1e3:10.1f}")
    print(f"torchlite: captures {c['frames']}, size instances {c['size_instances']}")
    # NOTE: with --torch-compile, the objects and collections are those of all three rows.
    who = "all rows" if a.torch_compile else "torchlite"
    kept = (objects["end"] - objects["begin"]) / a.n
    print(f"{who}: Python objects kept per new length: {kept:.1f}")
    for g in (0, 1, 2):
        ts = [d for gen, d in collections if gen == g]
        print(f"{who}: generation {g} collections: {len(ts)}, {sum(ts) * 1e3:.1f} ms in all")


if __name__ == "__main__":
    main()
