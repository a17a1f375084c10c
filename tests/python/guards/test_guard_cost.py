"""The per-call cost of guards: one guard for a module's hook dicts, attribute reads remembered
while the dicts they came from are unchanged, each graph input read once (by its guard).

Every change those shortcuts could miss must still recompile or give eager's result: a
parameter's .data reassigned (values, strides, dtype), a parameter replaced (through the module
or its _parameters dict), requires_grad flipped, in-place resize_/set_, a buffer or submodule
replaced, a module attribute or a config object's attribute changed, a class attribute, a dict
item, a global, train/eval, a hook registered.
"""

import copy

import pytest
import torch
from helpers import assert_counters_delta, counters
from torch import nn

import torchlite


class Config:
    scale = 1.0  # NOTE: a class attribute the instance may shadow

    def __init__(self):
        self.shift = 0.5
        self.table = {"gain": 2.0}


class Block(nn.Module):
    def __init__(self, d=6):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.5)
        self.alpha = nn.Parameter(torch.ones(1), requires_grad=False)
        self.register_buffer("offset", torch.zeros(d))
        self.cfg = Config()
        self.factor = 3.0

    def forward(self, x):
        h = self.drop(self.act(self.norm(self.fc(x)))) * self.alpha
        c = self.cfg
        return h * self.factor * c.scale * c.table["gain"] + c.shift + self.offset


GLOBAL_BIAS = 0.0


class WithGlobal(Block):
    def forward(self, x):
        return super().forward(x) + GLOBAL_BIAS


def _eval_pair(cls=Block):
    torch.manual_seed(0)
    m = cls().eval()
    return m, torchlite.compile(m)


def _check(m, compiled, x):
    with torch.no_grad():
        want = m(x)
        got = compiled(x)
    torch.testing.assert_close(got, want)
    assert got.dtype == want.dtype and got.requires_grad == want.requires_grad


def _guards_text(m, x):
    torchlite.reset()
    with torch.no_grad():
        return "\n".join(torchlite.explain(m)(x).guards)


def test_a_modules_hook_dicts_are_one_guard():
    torch.manual_seed(0)
    m = nn.Sequential(Block(), Block()).eval()
    text = _guards_text(m, torch.randn(2, 6))
    hook_lines = [g for g in text.splitlines() if g.startswith("EMPTY_DICT_ATTR")]
    modules = {g.split(".__dict__")[0] for g in hook_lines}
    assert len(hook_lines) == len(modules), text  # NOTE: was four a module
    for line in hook_lines:
        if "<torch.nn.modules.module" not in line:
            assert "'_forward_hooks'" in line and "'_forward_pre_hooks'" in line, line


def test_a_hook_registered_on_a_layer_after_compiling_is_applied():
    m, compiled = _eval_pair()
    x = torch.randn(2, 6)
    _check(m, compiled, x)
    m.norm.register_forward_hook(lambda mod, args, out: out * 2)
    _check(m, compiled, x)
    m.fc.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    _check(m, compiled, x)


def _mutations():
    def data_values(m):
        m.fc.weight.data = torch.randn(6, 6)

    def data_transposed(m):
        # NOTE: same shape, other strides: only the stride read sees it
        m.fc.weight.data = m.fc.weight.data.t()

    def data_dtype(m):
        m.double()

    def replaced(m):
        m.fc.weight = nn.Parameter(torch.randn(6, 6))

    def replaced_in_dict(m):
        m.fc._parameters["bias"] = nn.Parameter(torch.randn(6))

    def requires_grad_flipped(m):
        m.fc.weight.requires_grad_(False)

    def resized(m):
        with torch.no_grad():
            m.alpha.resize_(6)
            m.alpha.copy_(torch.arange(6.0))

    def set_storage(m):
        with torch.no_grad():
            m.alpha.set_(torch.full((1,), 4.0))

    def added_in_place(m):
        with torch.no_grad():
            m.norm.weight.add_(1.0)

    def buffer_replaced(m):
        m.offset = torch.ones(6)

    def submodule_replaced(m):
        m.act = nn.Tanh()

    def attribute_changed(m):
        m.factor = -1.5

    def config_attribute_changed(m):
        m.cfg.shift = 7.0

    def config_shadows_class_attribute(m):
        m.cfg.scale = 3.0

    def class_attribute_changed(m):
        Config.scale = 5.0

    def config_dict_item_changed(m):
        m.cfg.table["gain"] = -1.0

    def config_dict_replaced(m):
        m.cfg.__dict__ = {"shift": 1.0, "table": {"gain": 0.5}}

    def config_object_replaced(m):
        cfg = Config()
        cfg.shift = -2.0
        m.cfg = cfg

    def train_mode(m):
        m.train()
        m.drop.p = 0.0  # NOTE: deterministic, but dropout runs in training mode

    return [(f.__name__, f) for f in locals().values() if callable(f)]


@pytest.mark.parametrize("name,mutate", _mutations())
def test_a_change_after_compiling_gives_eagers_result(name, mutate):
    saved = Config.scale
    try:
        m, compiled = _eval_pair()
        x = torch.randn(3, 6)
        for _ in range(2):
            _check(m, compiled, x)
        mutate(m)
        x = x.double() if name == "data_dtype" else x
        for _ in range(2):
            _check(m, compiled, x)
    finally:
        Config.scale = saved


def test_a_global_changed_after_compiling_gives_eagers_result():
    global GLOBAL_BIAS
    m, compiled = _eval_pair(WithGlobal)
    x = torch.randn(3, 6)
    try:
        _check(m, compiled, x)
        GLOBAL_BIAS = 2.5
        _check(m, compiled, x)
    finally:
        GLOBAL_BIAS = 0.0


def test_two_models_of_one_class_alternating_keep_their_own_parameters():
    """One forward code, one entry per instance: the remembered reads of one instance's
    attributes must never serve the other's."""
    torch.manual_seed(0)
    a, b = Block().eval(), Block().eval()
    ca, cb = torchlite.compile(a), torchlite.compile(b)
    x = torch.randn(3, 6)
    for _ in range(3):
        _check(a, ca, x)
        _check(b, cb, x)
    b.fc.weight.data = a.fc.weight.data.clone() * 2
    _check(a, ca, x)
    _check(b, cb, x)


def test_unchanged_model_hits_the_cache():
    m, compiled = _eval_pair()
    x = torch.randn(3, 6)
    _check(m, compiled, x)
    before = counters()
    for _ in range(3):
        _check(m, compiled, torch.randn(3, 6))
    assert_counters_delta(before, counters(), frames=0, recompiles=0)


def test_training_step_changes_are_seen_every_call():
    torch.manual_seed(0)
    m = Block()
    m.drop.p = 0.0
    ref = copy.deepcopy(m)
    compiled = torchlite.compile(m)
    opt, ref_opt = (torch.optim.SGD(p.parameters(), lr=0.1) for p in (m, ref))
    for _ in range(3):
        x = torch.randn(4, 6)
        loss, ref_loss = compiled(x).square().mean(), ref(x).square().mean()
        torch.testing.assert_close(loss, ref_loss)
        for o, lo in ((opt, loss), (ref_opt, ref_loss)):
            o.zero_grad()
            lo.backward()
            o.step()
    torch.testing.assert_close(m.fc.weight, ref.fc.weight)


def test_entries_a_flag_alternates_between_stay_correct_without_recompiles():
    """The root that failed last is checked first: the order of the checks must not change
    which entry serves a call."""

    def fn(m, x, flag, scale):
        y = m(x)
        return y * scale if flag else y - scale

    m, _ = _eval_pair()
    compiled = torchlite.compile(fn)
    x = torch.randn(3, 6)
    with torch.no_grad():
        for flag in (True, False):
            torch.testing.assert_close(compiled(m, x, flag, 2.0), fn(m, x, flag, 2.0))
        before = counters()
        for i in range(6):
            flag = i % 2 == 0
            torch.testing.assert_close(compiled(m, x, flag, 2.0), fn(m, x, flag, 2.0))
        assert_counters_delta(before, counters(), frames=0, recompiles=0)
        m.fc.weight.data = torch.randn(6, 6)  # NOTE: seen by both entries
        for flag in (True, False, True):
            torch.testing.assert_close(compiled(m, x, flag, 2.0), fn(m, x, flag, 2.0))


class _Affine(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d))
        self.b = nn.Parameter(torch.randn(d))

    def forward(self, x):
        return (x * self.w + self.b).relu()


def test_tensor_guards_read_no_python_metadata(monkeypatch):
    """A TENSOR_MATCH that passes asks torch's own tensor check (one C++ call per tensor), not
    shape, stride() and device read as Python objects: with Tensor.stride replaced by a counting
    Python function (which also turns off the getters cached for torch.Tensor), a cache hit calls
    it for none of the three tensors. Changes the check must still see recompile."""
    m = _Affine()
    x = torch.randn(8, 8)
    cm = torchlite.compile(m)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        calls = []
        real = torch.Tensor.stride

        def counting(self, *args):
            calls.append(1)
            return real(self, *args)

        monkeypatch.setattr(torch.Tensor, "stride", counting)
        before = counters()
        torch.testing.assert_close(cm(x), m(x))
        assert counters()["cache_hits"] - before["cache_hits"] == 1
        assert calls == []
        monkeypatch.setattr(torch.Tensor, "stride", real)
        # what the shortcut answers False for, the reads decide: each still recompiles or runs
        # with eager's result
        for change in (
            lambda: m.w.requires_grad_(False),
            lambda: setattr(m.w, "data", torch.randn(8, 8).t()),
            lambda: setattr(m.b, "data", torch.randn(8, dtype=torch.float64)),
        ):
            change()
            y = torch.randn(8, 8)
            torch.testing.assert_close(cm(y), m(y))
        x_t = torch.randn(8, 8).t()
        torch.testing.assert_close(cm(x_t), m(x_t))
    with torch.inference_mode():
        x_i = torch.randn(8, 8)
        torch.testing.assert_close(cm(x_i), m(x_i))
