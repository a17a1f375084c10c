"""One settings table (csrc/core/flags.cpp): every setting through torchlite.config, the
environment and options=; no getenv elsewhere in csrc/; the README's table agrees with it."""

import json
import os
import pathlib
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import run_python

import torchlite
from torchlite import _C, config, settings

ROOT = pathlib.Path(__file__).resolve().parents[3]
TABLE = {s["name"]: s for s in settings.table()}
COMPILE = sorted(n for n, s in TABLE.items() if s["scope"] == "compile")
needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)
# A value other than the default for each compile-scope setting.
OTHER = {
    "functionalize": False,
    "fold_batch_norm": True,
    "channels_last": False,
    "cache_conv_weights": True,
    "convert_conv_weights": False,
    "verify": True,
    "compiled_backward": False,
    "recompute_in_backward": False,
    "recompute_matmul_inputs": False,
    "group_kernels": True,
    "cache_size_limit": 3,
    "cuda_graphs": True,
    "cuda_graphs_limit": 3,
    "autotune": True,
    "autotune_blocks": False,
    "cpu_kernels": False,
    "pad_matmuls": False,
    "matmul_layouts": False,
    "merge_duplicates": False,
    "small_products": False,
    "decompose_attention": False,
}
ENV_TEXT = {False: "0", True: "1", 3: "3"}


def test_no_getenv_outside_the_settings_table():
    offenders = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in (ROOT / "csrc").rglob("*")
        if p.suffix in (".cpp", ".h", ".c") and p.name != "flags.cpp"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"getenv\s*\(", line)
    ]
    assert offenders == []


def test_every_setting_is_a_config_attribute():
    assert set(OTHER) == set(COMPILE)
    for name, spec in TABLE.items():
        assert isinstance(getattr(config, name), (bool, int, str, type(None))), name
        assert spec["doc"] and spec["type"] in ("bool", "int", "str", "bool|None")


def _pipeline_settings(tmp_path, monkeypatch, **compile_kwargs):
    """The settings line of the trace of one compile: what reached the PassContext."""
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    x = torch.randn(8)
    torchlite.compile(lambda t: torch.relu(t) + 1, **compile_kwargs)(x)
    (pipeline,) = tmp_path.glob("run-*/*/pipeline.txt")
    line = next(s for s in pipeline.read_text().splitlines() if s.startswith("settings:"))
    return dict(kv.split("=", 1) for kv in line.split()[1:])


@needs_cpu_kernels
@pytest.mark.parametrize("name", sorted(OTHER))
def test_compile_setting_reaches_the_passes_through_options(name, tmp_path, monkeypatch):
    seen = _pipeline_settings(tmp_path, monkeypatch, options={name: OTHER[name]})
    assert seen[name] == str(OTHER[name])


@needs_cpu_kernels
@pytest.mark.parametrize("name", sorted(OTHER))
def test_compile_setting_reaches_the_passes_through_config(name, tmp_path, monkeypatch):
    monkeypatch.setattr(config, name, OTHER[name])
    assert _pipeline_settings(tmp_path, monkeypatch)[name] == str(OTHER[name])


def test_every_setting_is_read_from_its_environment_variable(tmp_path):
    values = {
        **{n: OTHER[n] for n in OTHER if TABLE[n]["env"]},
        "trace": True,
        "debug_dir": str(tmp_path / "dbg"),
        "logs": "graph_breaks",
        "cache_dir": str(tmp_path / "cache"),
        "cache_max_mb": 5,
        "disable": True,
        "check_meta": True,
        "cpu_pool_mb": 7,
        "cpu_vector_bits": 256,
        "nvrtc": "/nowhere/libnvrtc.so",
        "cuda_home": "/nowhere",
    }
    assert set(values) == {n for n, s in TABLE.items() if s["env"]}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name, value in values.items():
        env[TABLE[name]["env"]] = ENV_TEXT.get(value, str(value)) if value is not True else "1"
    names = sorted(values)
    script = f"import torchlite; print({{n: getattr(torchlite.config, n) for n in {names!r}}})"
    assert eval(run_python(script, env)) == values


@needs_cpu_kernels
def test_options_turn_channels_last_and_batch_norm_folding_on_and_off():
    w, m, v = torch.randn(4, 4, 3, 3), torch.randn(4), torch.rand(4) + 0.5

    def f(x):
        y = torch.relu(F.batch_norm(F.conv2d(x, w, padding=1), m, v, training=False))
        return F.conv2d(y, w, padding=1).sigmoid()

    x = torch.randn(2, 4, 8, 8)
    for on in (True, False):
        torchlite.reset()
        before = torchlite.counters()
        opts = {"channels_last": on, "fold_batch_norm": on}
        torch.testing.assert_close(torchlite.compile(f, options=opts)(x), f(x))
        after = torchlite.counters()
        assert after["channels_last_convs"] - before["channels_last_convs"] == (2 if on else 0)
        assert after["batch_norms_folded"] - before["batch_norms_folded"] == (1 if on else 0)


def test_unknown_option_is_a_value_error_listing_the_known_ones():
    with pytest.raises(ValueError, match="unknown option 'channel_last'; known options: ") as e:
        torchlite.compile(torch.sin, options={"channel_last": False})
    for name in COMPILE:
        assert name in str(e.value)


def test_process_setting_as_an_option_says_where_to_set_it():
    with pytest.raises(
        ValueError,
        match=r"'cache_dir' is a process-wide setting; set "
        r"torchlite.config.cache_dir or TORCHLITE_CACHE_DIR",
    ):
        torchlite.compile(torch.sin, options={"cache_dir": "/tmp"})


def test_option_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="'functionalize' takes a bool, got str"):
        torchlite.compile(torch.sin, options={"functionalize": "no"})(torch.randn(3))


@pytest.mark.parametrize("mode", list(settings.PRESETS))
def test_every_mode_preset_is_accepted(mode):
    x = torch.randn(8)
    torch.testing.assert_close(torchlite.compile(torch.sin, mode=mode)(x), torch.sin(x))


@needs_cpu_kernels
def test_config_cache_dir_moves_the_kernel_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "moved"))
    # NOTE: a constant no other test uses, so the kernel is new to this process.
    c = float(torch.randint(1 << 20, (1,)).item()) + 0.123

    def f(x):
        return (x * c).tanh() + 1

    x = torch.randn(64)
    torch.testing.assert_close(torchlite.compile(f)(x), f(x))
    assert any(p.is_file() for p in (tmp_path / "moved").rglob("*"))
    assert _C.process_settings()["cache_dir"] == str(tmp_path / "moved")


def _readme_rows():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.match(r"`([A-Z_]+)", cells[0]) if len(cells) == 3 else None
        if m and not cells[2].startswith(("Build time", "For the setup scripts")):
            rows[m.group(1)] = cells[1]
    return rows


def test_readme_environment_table_matches_the_settings_table():
    table = {s["env"]: s["default_text"] for s in TABLE.values() if s["env"]}
    assert _readme_rows() == table


def test_documented_on_off_defaults_are_the_real_defaults():
    # NOTE: a fresh interpreter with no TORCHLITE_* variables: config holds the real defaults.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHLITE_")}
    names = [
        n for n, s in TABLE.items() if s["type"] == "bool" and s["default_text"] in ("on", "off")
    ]
    code = (
        "import json, torchlite; print(json.dumps({n: getattr(torchlite.config, n) for n in %r}))"
    )
    actual = json.loads(run_python(code % names, env).strip().splitlines()[-1])
    documented = {n: TABLE[n]["default_text"] == "on" for n in names}
    assert names and actual == documented
