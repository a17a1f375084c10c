"""DistributedDataParallel with torchlite: both forms, eager and compiled backward, 2 CPU
processes on gloo, losses/gradients/parameters equal eager DDP's on every step (cases.py).
The `results` fixture (conftest.py) runs CASES once for the session."""

import pytest
import torch.distributed as dist
from launch import run_cases, values

from torchlite import _C

# NOTE: gloo runs on the CPU; a build without LLVM (the GPU machine's) runs CPU graphs op by op
CPU_KERNELS = _C.has_llvm

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")

PARITY = [
    (model, optimizer, dtype, form, backward)
    for model, optimizer, dtype in [
        # NOTE: AdamW turns float32 rounding noise of near-zero gradients into full steps:
        # float64 keeps the comparison about the gradients (tests/python/training does too)
        ("transformer", "adamw", "float64"),
        ("convnet", "sgd", "float32"),
    ]
    for form in ["ddp_of_compiled", "compiled_ddp"]
    for backward in [False, True]
]


def _name(model, form, backward) -> str:
    return f"{model}-{form}-{'compiled_backward' if backward else 'eager_backward'}"


CASES = [
    {
        "name": _name(model, form, backward),
        "fn": "ddp_parity",
        "kwargs": {
            "model": model,
            "form": form,
            "compiled_backward": backward,
            "optimizer": optimizer,
            "dtype": dtype,
        },
    }
    for model, optimizer, dtype, form, backward in PARITY
] + [
    {
        "name": "no_sync",
        "fn": "ddp_parity",
        "kwargs": {
            "model": "transformer",
            "form": "compiled_ddp",
            "compiled_backward": True,
            "optimizer": "sgd",
            "dtype": "float64",
            "no_sync_steps": [0],
        },
    },
    {
        "name": "find_unused_parameters",
        "fn": "ddp_parity",
        "kwargs": {
            "model": "convnet",
            "form": "compiled_ddp",
            "compiled_backward": True,
            "ddp_kwargs": {"find_unused_parameters": True},
        },
    },
    {
        "name": "static_graph",
        "fn": "ddp_parity",
        "kwargs": {
            "model": "convnet",
            "form": "compiled_ddp",
            "compiled_backward": True,
            "ddp_kwargs": {"static_graph": True},
        },
    },
    {
        "name": "ddp_of_compiled_small_buckets",
        "fn": "ddp_parity",
        "kwargs": {
            "model": "transformer",
            "form": "ddp_of_compiled",
            "compiled_backward": True,
            "optimizer": "adamw",
            "dtype": "float64",
            "ddp_kwargs": {"bucket_cap_mb": 0.004},
        },
    },
    {
        "name": "convnet_small_buckets",
        "fn": "ddp_parity",
        "kwargs": {
            "model": "convnet",
            "form": "compiled_ddp",
            "compiled_backward": True,
            "ddp_kwargs": {"bucket_cap_mb": 0.002},
        },
    },
    {"name": "overlap_split", "fn": "ddp_overlap", "kwargs": {"compiled_backward": True}},
    {"name": "overlap_eager_hooks", "fn": "ddp_overlap", "kwargs": {"compiled_backward": False}},
]


@pytest.mark.parametrize(("model", "optimizer", "dtype", "form", "backward"), PARITY)
def test_ddp_training_steps_equal_eager_ddp(results, model, optimizer, dtype, form, backward):
    for info in values(results, _name(model, form, backward)):
        # one graph, captured once: DDP's forward and the standard-library helpers it calls
        # (contextlib for _inside_ddp_forward) are never captured
        assert info["graphs"] == 1 and info["graph_breaks"] == 0, info
        assert info["recompiles"] == 0, info
        # NOTE: the default buckets (25 MB) hold the whole tiny model: nothing to split
        assert info["pieces"] == [], info
        assert info["compiled_backward_used"] == backward, info
        if backward:
            assert (info["kernels"] > 0) == CPU_KERNELS, info


def test_no_sync_step_accumulates_like_eager_ddp(results):
    # step 0 under no_sync: local gradients differ across ranks, accumulate into step 1
    for info in values(results, "no_sync"):
        assert info["compiled_backward_used"], info
        assert len(info["losses"]) == 3


def test_find_unused_parameters_runs_ddp_sink_like_eager(results):
    for info in values(results, "find_unused_parameters"):
        # NOTE: the outputs pass through DDP's _DDPSink, so their grad_fn is not ours: the
        # compiled backward shows in the kernels compiled for it (none without it)
        assert info["graphs"] >= 1 and (info["kernels"] > 0) == CPU_KERNELS, info


def test_static_graph_delays_allreduce_like_eager(results):
    for info in values(results, "static_graph"):
        assert info["graphs"] >= 1 and (info["kernels"] > 0) == CPU_KERNELS, info


@pytest.mark.parametrize("name", ["ddp_of_compiled_small_buckets", "convnet_small_buckets"])
def test_split_at_small_buckets_equals_eager_ddp(results, name):
    # DDP(torchlite.compile(m)) is captured inside DDP's forward as well; batch norm's running
    # statistics (input mutations) cross the pieces of the conv net
    for info in values(results, name):
        assert len(info["pieces"]) == 1 and info["pieces"][0] >= 2, info
        assert info["compiled_backward_used"] and info["all_pieces_compiled"], info


def _allreduce_before_first_layer_gradient(events: list[str]) -> bool:
    first = events.index("gradient of emb.weight")
    return any(e.startswith("allreduce") for e in events[:first])


def test_compiled_backward_split_at_buckets_overlaps_allreduce(results):
    for info in values(results, "overlap_split"):
        assert len(info["pieces"]) == 1 and info["pieces"][0] >= 3, info
        assert "DDP bucket split" in info["explain"], info["explain"]
        assert info["compiled_backward_used"] and info["all_pieces_compiled"], info
        # every bucket all-reduced through the comm hook, the first ones while the backward of
        # the first layers has not run yet
        assert sum(e.startswith("allreduce") for e in info["events"]) >= 3, info
        assert _allreduce_before_first_layer_gradient(info["events"]), info


def test_eager_backward_fires_ddp_hooks_per_bucket(results):
    for info in values(results, "overlap_eager_hooks"):
        assert info["pieces"] == [], info
        assert "DDP bucket split" not in info["explain"], info["explain"]
        assert not info["compiled_backward_used"], info
        assert sum(e.startswith("allreduce") for e in info["events"]) >= 3, info
        assert _allreduce_before_first_layer_gradient(info["events"]), info


@pytest.mark.cuda
def test_ddp_on_two_gpus_with_nccl_equals_eager_ddp():
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA GPUs")
    cases = [c for c in CASES if c["fn"] == "ddp_overlap" or "compiled_backward" in c["name"]]
    res = run_cases(cases, backend="nccl")
    for c in cases:
        values(res, c["name"])
