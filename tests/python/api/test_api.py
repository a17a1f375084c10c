"""The public Python API: argument checking, wrapper forms, module pass-through, explain,
counters, configuration and the backend registry."""

import copy
import importlib.metadata
import logging
import os
import subprocess
import sys

import pytest
import torch
from torch import fx, nn

import torchlite
from torchlite import _C, backends, config


def add_one(x):
    return (x * 2 + 1).relu()


def make_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


@pytest.fixture(autouse=True)
def _fresh():
    torchlite.reset()
    yield
    torchlite.reset()


# --- argument checking -------------------------------------------------------------------


def test_non_callable_raises_type_error_naming_the_object():
    with pytest.raises(TypeError) as e:
        torchlite.compile(42)
    assert str(e.value) == (
        "torchlite.compile expects a function or an nn.Module, got int object 42, "
        "which is not callable"
    )


def gen(x):
    yield x


async def coro(x):
    return x


@pytest.mark.parametrize(
    "fn, kind", [(gen, "a generator function"), (coro, "a coroutine function")]
)
def test_generator_and_coroutine_functions_are_rejected(fn, kind):
    with pytest.raises(TypeError) as e:
        torchlite.compile(fn)
    assert str(e.value) == (
        f"torchlite.compile: {fn.__qualname__} is {kind} and cannot be compiled; "
        "compile the code that consumes it instead"
    )


def test_unknown_mode_lists_valid_modes():
    with pytest.raises(ValueError) as e:
        torchlite.compile(add_one, mode="fast")
    assert str(e.value) == (
        "torchlite.compile: unknown mode 'fast'; valid modes: None, 'default', "
        "'reduce-overhead', 'max-autotune', 'max-autotune-no-cudagraphs'"
    )


def test_unknown_backend_lists_registered_backends():
    with pytest.raises(ValueError) as e:
        torchlite.compile(add_one, backend="tvm")
    assert str(e.value) == (
        "unknown backend 'tvm'; registered backends: aot_eager, eager, inductor, torchlite "
        "(add one with torchlite.register_backend)"
    )


def test_options_must_be_a_dict():
    with pytest.raises(
        TypeError, match="^torchlite.compile: options must be a dict or None, got list$"
    ):
        torchlite.compile(add_one, options=["max_autotune"])


def test_mode_and_options_together_are_rejected():
    with pytest.raises(ValueError, match="give either mode or options, not both"):
        torchlite.compile(add_one, mode="default", options={"a": 1})


def test_bad_arguments_fail_at_decoration_time():
    with pytest.raises(ValueError, match="unknown mode"):
        torchlite.compile(mode="nope")


def test_backend_of_wrong_type_raises_type_error():
    with pytest.raises(TypeError, match="backend must be a registered name or a callable"):
        torchlite.compile(add_one, backend=3)


# --- wrapper forms -----------------------------------------------------------------------


def test_bare_decorator_compiles_and_matches_eager():
    @torchlite.compile
    def f(x):
        return x.sin() + 1

    x = torch.randn(8)
    torch.testing.assert_close(f(x), x.sin() + 1)
    assert f.__name__ == "f" and f.__wrapped__ is not None


def test_decorator_with_arguments_compiles_and_matches_eager():
    @torchlite.compile(fullgraph=True, mode="default")
    def f(x, y):
        return x * y - 1

    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(f(x, y), x * y - 1)


def test_compile_of_function_keeps_metadata():
    f = torchlite.compile(add_one)
    assert isinstance(f, _C.CompiledFunction)
    assert (f.__name__, f.__qualname__, f.__doc__) == ("add_one", "add_one", None)
    x = torch.randn(8)
    torch.testing.assert_close(f(x), add_one(x))


def test_disable_argument_returns_input_unchanged():
    mod = make_mlp()
    assert torchlite.compile(add_one, disable=True) is add_one
    assert torchlite.compile(mod, disable=True) is mod


def test_config_disable_returns_input_unchanged(monkeypatch):
    monkeypatch.setattr(config, "disable", True)
    assert torchlite.compile(add_one) is add_one


def test_torchlite_disable_env_returns_input_unchanged():
    code = "import torchlite\nf = lambda x: x\nprint(torchlite.compile(f) is f)"
    for value, expected in (("1", "True"), ("0", "False")):
        env = {**os.environ, "TORCHLITE_DISABLE": value}
        out = subprocess.run(
            [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected


def test_disabled_function_runs_eagerly_inside_compiled_code():
    seen = []

    @torchlite.disable
    def log(x):
        seen.append(x.shape)
        return x

    @torchlite.compile
    def f(x):
        return log(x + 1) * 2

    x = torch.randn(4)
    torch.testing.assert_close(f(x), (x + 1) * 2)
    assert seen == [torch.Size([4])]
    assert isinstance(log, _C.DisabledFunction) and log.__name__ == "log"


# --- module wrapper ----------------------------------------------------------------------


def test_module_wrapper_shares_state_with_the_original():
    mod = make_mlp()
    opt = torchlite.compile(mod)
    assert isinstance(opt, nn.Module) and opt._orig_mod is mod
    assert list(opt.state_dict()) == list(mod.state_dict())
    assert all(a is b for a, b in zip(opt.parameters(), mod.parameters(), strict=True))
    assert [n for n, _ in opt.named_modules()] == [n for n, _ in mod.named_modules()]
    assert opt.get_submodule("0") is mod[0] and opt.training


def test_module_wrapper_train_eval_and_to_act_on_the_original():
    mod = make_mlp()
    opt = torchlite.compile(mod)
    assert opt.eval() is opt and not mod.training and not mod[1].training and not opt.training
    assert opt.train() is opt and mod.training
    assert opt.to(torch.float64) is opt and mod[0].weight.dtype == torch.float64


def test_module_wrapper_attribute_reads_and_writes_reach_the_original():
    mod = make_mlp()
    opt = torchlite.compile(mod)
    opt.scale = 3.0
    assert mod.scale == 3.0 and opt.scale == 3.0
    opt.load_state_dict(make_mlp().state_dict())


def test_module_wrapper_output_and_hooks_match_eager():
    mod = make_mlp().eval()
    calls = []
    mod.register_forward_hook(lambda m, args, out: calls.append(out.shape))
    opt = torchlite.compile(mod)
    x = torch.randn(5, 4)
    torch.testing.assert_close(opt(x), mod(x))
    assert calls == [torch.Size([5, 2])] * 2


def test_module_wrapper_nested_in_a_parent_keeps_state_dict_keys():
    parent = nn.Sequential(make_mlp())
    keys = list(parent.state_dict())
    parent[0] = torchlite.compile(parent[0])
    assert list(parent.state_dict()) == keys


def test_module_wrapper_deepcopy_copies_the_original():
    opt = torchlite.compile(make_mlp())
    clone = copy.deepcopy(opt)
    assert isinstance(clone, torchlite.OptimizedModule)
    assert clone._orig_mod is not opt._orig_mod
    x = torch.randn(2, 4)
    torch.testing.assert_close(clone.eval()(x), opt.eval()(x))


# --- explain, counters, reset ------------------------------------------------------------


def breaks_once(x):
    y = x * 2
    print("hello from breaks_once")
    return y + 1


def test_explain_reports_graphs_breaks_and_guards():
    out = torchlite.explain(breaks_once)(torch.randn(4))
    assert out.graph_count == len(out.graphs) == len(out.ops_per_graph)
    assert out.graph_break_count == len(out.break_reasons) >= 1
    reason = out.break_reasons[0]
    assert reason.kind == "unsupported_builtin"
    print_line = breaks_once.__code__.co_firstlineno + 2
    assert (reason.filename, reason.lineno) == (__file__, print_line)
    assert all(isinstance(g, str) for g in out.guards)
    assert all(isinstance(g, _C.Graph) for g in out.graphs)
    text = str(out)
    assert text.startswith("Graph count: ") and "unsupported_builtin" in text


def test_explain_traces_again_a_function_already_compiled():
    f = torchlite.compile(add_one)
    f(torch.randn(8))
    out = torchlite.explain(f)(torch.randn(8))
    assert out.graph_count == 1 and out.graph_break_count == 0 and out.ops_per_graph[0] >= 2


def test_explain_records_whether_each_graph_ran_fused_kernels():
    # NOTE: a sweep that only compares results counts a graph run op by op as a checked kernel;
    # each frame record says "N kernels" (with the passes + build time) or "op by op: why".
    out = torchlite.explain(add_one)(torch.randn(8))
    (rec,) = [r for r in out.frames if r["graph"] is not None]
    assert rec["kernels"] == "1 kernels", rec["kernels"]
    assert int(rec["compile_ms"]) >= 0
    torchlite.reset()
    out = torchlite.explain(lambda x: x @ x)(torch.randn(4, 4))
    (rec,) = [r for r in out.frames if r["graph"] is not None]
    assert rec["kernels"] == "op by op: nothing to fuse", rec["kernels"]
    torchlite.reset()
    w = torch.randn(8, requires_grad=True)
    out = torchlite.explain(lambda x: (x * w).sin())(torch.randn(8))
    (rec,) = [r for r in out.frames if r["graph"] is not None]
    assert rec["kernels"] == rec["training"] == "compiled forward and backward", rec


def test_counters_have_the_documented_keys():
    keys = {
        "frames",
        "graphs",
        "graph_breaks",
        "recompiles",
        "cache_hits",
        "kernels",
        "eager_fallbacks",
        "capture_ns",
        "batch_norms_folded",
        "channels_last_convs",
        "conv_biases_split",
        "conv_weights_cached",
        "conv_weight_copies",
        "conv_weights_converted",
        "matmuls_padded",
        "duplicates_merged",
        "attentions_decomposed",
        "producers_recomputed",
        "cuda_graph_recordings",
        "cuda_graph_replays",
        "autotune_trials",
        "autotune_cached",
        "matmul_epilogues_changed",
        "size_instances",
        "nvrtc_compiles",
        "launches_grouped",
        "kernel_launches",
    }
    torchlite.reset_counters()
    assert set(torchlite.counters()) == keys
    assert all(v == 0 for v in torchlite.counters().values())
    torchlite.compile(add_one)(torch.randn(8))
    assert torchlite.counters()["frames"] >= 1


def test_internal_error_is_the_core_exception():
    assert torchlite.InternalError is _C.InternalError
    assert issubclass(torchlite.InternalError, RuntimeError)


# --- config ------------------------------------------------------------------------------


def test_log_events_reach_the_torchlite_logger(caplog):
    from torchlite import _install

    with caplog.at_level(logging.INFO, logger="torchlite"):
        _install.log_sink("recompiles", "f recompiled: shape changed")
    assert caplog.records[-1].getMessage() == "[recompiles] f recompiled: shape changed"
    assert caplog.records[-1].channel == "recompiles"


def test_config_logs_enable_channels_at_compile(monkeypatch):
    monkeypatch.setattr(config, "logs", "graph_breaks")
    torchlite.compile(add_one)
    assert _C.log_enabled("graph_breaks") and not _C.log_enabled("recompiles")
    monkeypatch.setattr(config, "logs", "")
    torchlite.compile(add_one)
    assert not _C.log_enabled("graph_breaks")


def test_config_trace_dumps_into_debug_dir(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path / "dbg"))
    torchlite.compile(add_one)(torch.randn(8))
    monkeypatch.setattr(config, "trace", False)
    torchlite.compile(add_one)
    assert any(p.is_file() for p in (tmp_path / "dbg").rglob("*"))


# --- backends ----------------------------------------------------------------------------


def test_builtin_backends_are_registered():
    assert {"torchlite", "eager", "aot_eager", "inductor"} <= set(torchlite.list_backends())


def test_register_backend_adds_a_name_once(monkeypatch):
    monkeypatch.setattr(backends, "_registry", dict(backends._registry))

    @torchlite.register_backend("mine")
    def mine(gm, example_inputs):
        return gm.forward

    assert "mine" in torchlite.list_backends()
    with pytest.raises(ValueError, match="^register_backend: a backend named 'mine' is already"):
        torchlite.register_backend("mine", mine)


def test_callable_backend_receives_a_graph_module_and_example_inputs():
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    f = torchlite.compile(add_one, backend=backend)
    x = torch.randn(8)
    torch.testing.assert_close(f(x), add_one(x))
    gm, inputs = seen[0]
    assert isinstance(gm, fx.GraphModule)
    assert [n.op for n in gm.graph.nodes].count("placeholder") == len(inputs) == 1
    assert isinstance(gm(x), tuple)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_registered_backends_match_eager(backend):
    f = torchlite.compile(add_one, backend=backend)
    x = torch.randn(8)
    torch.testing.assert_close(f(x), add_one(x))


def test_torchlite_serves_as_a_torch_compile_backend():
    torch._dynamo.reset()
    x = torch.randn(8)
    torch.testing.assert_close(
        torch.compile(add_one, backend=backends.dynamo_backend)(x), add_one(x)
    )
    names = [e.name for e in importlib.metadata.entry_points(group="torch_dynamo_backends")]
    assert "torchlite" in names


def test_explain_counts_the_torch_ops_that_ran_eagerly_at_a_break():
    def fn(x):
        y = x.sin() + 1
        v = int(y.sum().item() > 0)
        return y.cos() * 2 + v

    report = torchlite.explain(fn)(torch.randn(3))
    assert report.graph_break_count >= 1
    first = report.break_reasons[0]
    assert first.kind == "data_dependent_op" and first.eager_ops >= 1
    assert "ran eagerly there" in str(first)
