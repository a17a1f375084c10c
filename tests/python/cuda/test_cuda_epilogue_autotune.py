"""mode="max-autotune" for matrix products with a bias on the GPU (pipeline/matmul_epilogues.h):
every form (bias in cuBLAS's call, bias in the kernel that reads the product, bias and ReLU /
tanh-GELU in cuBLASLt's epilogue through torch._addmm_activation) equals eager over dtypes,
activations, 2-d and 3-d inputs, biases and weights stored either way, and in training steps
(gradients too); the real trials are timed and traced, and another process reads the choices
without timing."""

import json
import math
import os
import pathlib

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_training_step_matches, run_python
from torch import nn

import torchlite
from torchlite import _epilogue_trials, config, settings

pytestmark = pytest.mark.cuda
ROOT = str(pathlib.Path(__file__).resolve().parents[3])

ACTIVATIONS = {
    "none": lambda y: y * 1.5,  # a pointwise reader: the bias can move into it
    "relu": torch.relu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "gelu": F.gelu,  # exact: never cuBLASLt's
    # GPT-2's tanh GELU written out (transformers' NewGELUActivation)
    "gelu_gpt2": lambda y: (
        0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0))))
    ),
}
CUBLASLT = ("relu", "gelu_tanh", "gelu_gpt2")


def make_fn(act, addmm):
    a = ACTIVATIONS[act]
    if addmm:  # GPT-2's Conv1D: weight stored [in, out], addmm over the flattened input

        def f(x, w, b):
            y = torch.addmm(b, x.reshape(-1, x.shape[-1]), w) if b is not None else None
            if y is None:
                y = x.reshape(-1, x.shape[-1]) @ w
            return a(y.view(*x.shape[:-1], w.shape[1]))

    else:

        def f(x, w, b):
            return a(F.linear(x, w, b))

    return f


def tolerances(dtype):
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    return {"rtol": tol, "atol": tol}


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path / "dbg"))
    settings.apply_process_settings()
    torchlite.reset_counters()
    yield tmp_path / "dbg"
    monkeypatch.undo()
    settings.apply_process_settings()


def force(monkeypatch, form, tried):
    """A fake timer under which `form` ("addmm", "mm+bias", "activation") is fastest."""

    def timer(site, label):
        tried.append(label)
        key = "activation" if label.startswith("addmm_activation") else label
        return 1.0 if key == form else 10.0

    monkeypatch.setattr(_epilogue_trials, "timer", timer)


CASES = [  # (shape, addmm, bias): 2-d and 3-d inputs, GPT-2's Conv1D, no bias
    ((48, 64), False, True),
    ((3, 40, 64), False, True),
    ((3, 40, 64), True, True),
    ((3, 40, 64), False, False),
]


@pytest.mark.parametrize(
    "dtype, act, form, case",
    [
        (dtype, act, form, 1)
        for dtype in (torch.float32, torch.bfloat16)
        for act in ACTIVATIONS
        for form in ("addmm", "mm+bias", "activation")
    ]
    + [
        (dtype, act, form, case)
        for dtype, act in (
            (torch.float32, "relu"),
            (torch.bfloat16, "relu"),
            (torch.bfloat16, "gelu_tanh"),
            (torch.bfloat16, "gelu_gpt2"),
        )
        for form in ("mm+bias", "activation")
        for case in (0, 2, 3)
    ],
)
def test_every_form_equals_eager(monkeypatch, fresh, dtype, act, form, case):
    shape, addmm, bias = CASES[case]
    tried = []
    force(monkeypatch, form, tried)
    f = make_fn(act, addmm)
    n = 96
    compiled = torchlite.compile(f, mode="max-autotune-no-cudagraphs")
    for _ in range(2):
        x = torch.randn(*shape, device="cuda", dtype=dtype)
        w = torch.randn(*((shape[-1], n) if addmm else (n, shape[-1])), device="cuda", dtype=dtype)
        w = w / shape[-1] ** 0.5
        b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
        torch.testing.assert_close(compiled(x, w, b), f(x, w, b), **tolerances(dtype))
    offered = set(tried)
    if not bias:
        assert not tried  # no bias: nothing to choose
        return
    assert "addmm" in offered and "mm+bias" in offered
    cublaslt = act in CUBLASLT
    assert any(t.startswith("addmm_activation") for t in offered) == cublaslt
    changed = torchlite.counters()["matmul_epilogues_changed"]
    assert changed == (form == "mm+bias" or (form == "activation" and cublaslt))


def test_a_transposed_linear_weight_and_cuda_graphs(monkeypatch, fresh):
    tried = []
    force(monkeypatch, "activation", tried)
    f = make_fn("relu", False)
    compiled = torchlite.compile(f, mode="max-autotune")
    for _ in range(3):
        x = torch.randn(4, 32, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16).t()  # [128, 64], strided
        b = torch.randn(128, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(compiled(x, w, b), f(x, w, b), **tolerances(torch.bfloat16))
    assert torchlite.counters()["matmul_epilogues_changed"] == 1


class Mlp(torch.nn.Module):
    def __init__(self, d=768):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def test_real_trials_are_timed_and_traced(fresh):
    model = Mlp().cuda().to(torch.bfloat16).eval()
    compiled = torchlite.compile(model, mode="max-autotune-no-cudagraphs")
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(8, 128, 768, device="cuda", dtype=torch.bfloat16)
            torch.testing.assert_close(compiled(x), model(x), rtol=3e-2, atol=3e-2)
    (report,) = fresh.glob("run-*/*/autotune_epilogues.txt")
    text = report.read_text()
    # fc1 (its GELU read by fc2 only) and fc2 (its product read by the residual add)
    assert "1024x768x3072: addmm: " in text and "addmm_activation(gelu): " in text, text
    assert "1024x3072x768: addmm: " in text and "mm+bias: " in text, text
    assert text.count(" us; ") >= 7 and text.count("-> ") == 2, text


# Training: the forward half saves each hidden product (the pre-activation) for backward; the
# bias moves into the kernel of ours that reads it (which then writes the saved sum too), and
# cuBLASLt's activation form is never offered there.
TRAIN_ACTS = {"relu": nn.ReLU, "gelu_tanh": lambda: nn.GELU("tanh"), "gelu": nn.GELU}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", list(TRAIN_ACTS))
@pytest.mark.parametrize("form", ["addmm", "mm+bias"])
@pytest.mark.parametrize("shape", [(3, 40, 64), (96, 64)])
def test_a_training_step_in_every_form_equals_eager(monkeypatch, fresh, dtype, act, form, shape):
    tried = []
    force(monkeypatch, form, tried)
    a = TRAIN_ACTS[act]
    model = nn.Sequential(nn.Linear(64, 128), a(), nn.Linear(128, 64), a(), nn.Linear(64, 8))
    model = model.cuda().to(dtype)
    compiled = torchlite.compile(model, mode="max-autotune-no-cudagraphs")
    assert_training_step_matches(model, compiled, shape, dtype)
    assert "mm+bias" in tried and not [t for t in tried if t.startswith("addmm_activation")]
    assert torchlite.counters()["matmul_epilogues_changed"] == (2 if form == "mm+bias" else 0)


def test_real_trials_of_a_training_forward(fresh):
    model = Mlp().cuda().to(torch.bfloat16)
    compiled = torchlite.compile(model, mode="max-autotune")
    assert_training_step_matches(model, compiled, (8, 128, 768), torch.bfloat16, steps=3)
    (report,) = fresh.glob("run-*/*/forward/autotune_epilogues.txt")
    text = report.read_text()
    # fc1: read by its GELU and saved for backward; no cuBLASLt GELU there
    assert "1024x768x3072: addmm: " in text and "mm+bias: " in text, text
    assert "addmm_activation" not in text, text


_PROCESS = """
import json, torch, torchlite
from torch import nn
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU("tanh"), nn.Linear(1024, 256), nn.ReLU())
model = model.cuda().to(torch.bfloat16).eval()
compiled = torchlite.compile(model, mode="max-autotune-no-cudagraphs")
with torch.no_grad():
    x = torch.randn(4, 256, 256, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(compiled(x), model(x), rtol=3e-2, atol=3e-2)
c = torchlite.counters()
print(json.dumps({k: c[k] for k in ("autotune_trials", "autotune_cached")}))
"""


def test_another_process_reads_every_choice_without_timing(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, TORCHLITE_CACHE_DIR=str(tmp_path / "cache"))

    def run():
        return json.loads(run_python(_PROCESS, env, timeout=300).strip().splitlines()[-1])

    first = run()
    assert first["autotune_trials"] >= 6 and first["autotune_cached"] == 0
    second = run()
    assert second["autotune_trials"] == 0 and second["autotune_cached"] >= 2
