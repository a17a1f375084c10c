"""The layers of csrc/ depend on each other only down the pipeline (docs/internals/layering.md).

CMakeLists.txt builds one static library per layer from its `tl_layer(NAME DEPS...)`
lines; these tests read that table and check every #include of csrc/ against it, so
a wrong include fails here with the file and line instead of as a link error.
"""

import importlib.util
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CSRC = ROOT / "csrc"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.MULTILINE)
# python/ binds every layer; it is the extension module, not a library.
BINDINGS = "python"


def layer_table() -> dict[str, set[str]]:
    """Layer -> the layers it may include: the table ctest's link check reads too."""
    spec = importlib.util.spec_from_file_location(
        "check_layer_links", ROOT / "tests" / "cpp" / "check_layer_links.py"
    )
    links = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(links)
    return links.layer_table(ROOT / "CMakeLists.txt")


def include_edges():
    """(file, line number, its layer, the layer it includes) for every csrc include."""
    for path in sorted(CSRC.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".c"):
            continue
        layer = path.relative_to(CSRC).parts[0]
        text = path.read_text()
        for m in INCLUDE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield path.relative_to(ROOT), line, layer, m.group(1)


def test_table_covers_every_layer_in_pipeline_order():
    allowed = layer_table()
    folders = {p.name for p in CSRC.iterdir() if p.is_dir()} - {BINDINGS}
    assert set(allowed) == folders, "every csrc/ folder but python/ is one tl_layer"
    # docs/internals/layering.md: core <- ir <- passes <- codegen <- runtime; capture, guards and
    # bytecode on ir; pipeline and frame tie them together.
    chain = ["core", "ir", "passes", "codegen", "runtime", "pipeline", "frame"]
    for lower, upper in itertools.pairwise(chain):
        assert lower in allowed[upper] and upper not in allowed[lower], (lower, upper)
    for layer in ("capture", "guards", "bytecode"):
        assert "ir" in allowed[layer]
        assert not allowed[layer] & {"passes", "codegen", "runtime", "pipeline", "frame"}
    assert "capture" not in allowed["bytecode"], "bytecode must not include capture"
    assert not [layer for layer, deps in allowed.items() if layer in deps], "a cycle"


def test_every_include_points_down_the_pipeline():
    allowed = layer_table()
    wrong = [
        f"{path}:{line}: {layer}/ includes {target}/ (allowed: {', '.join(sorted(allowed[layer]))})"
        for path, line, layer, target in include_edges()
        if layer != BINDINGS and target != layer and target not in allowed.get(layer, set())
    ]
    assert not wrong, (
        "includes that reach back up the pipeline (CMakeLists.txt tl_layer):\n" + "\n".join(wrong)
    )


def test_only_the_bindings_include_pybind11():
    offenders = [
        str(p.relative_to(ROOT))
        for p in CSRC.rglob("*")
        if p.suffix in (".h", ".cpp") and p.relative_to(CSRC).parts[0] != BINDINGS
        if re.search(r"#\s*include\s+[<\"]pybind11/", p.read_text())
    ]
    assert not offenders


def test_no_csrc_file_imports_torchlite_modules_by_name():
    # NOTE: the package registers the Python functions C++ calls at import
    # (core/python_helpers.h, torchlite/_install.py).
    pattern = re.compile(r'import\w*\("torchlite[."]')
    hits = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in CSRC.rglob("*")
        if p.suffix in (".h", ".cpp", ".c")
        for m in pattern.finditer(p.read_text())
    ]
    assert not hits


def test_an_unregistered_python_helper_is_an_error_naming_it():
    import torch

    import torchlite
    from torchlite import _C, _backend_layout

    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 8, 8)
    _C.register_python_helper("backend_layout.eager_layout", None)
    try:
        torchlite.reset()
        with pytest.raises(torchlite.InternalError, match="backend_layout.eager_layout"):
            torchlite.compile(conv)(x)
    finally:
        _C.register_python_helper("backend_layout.eager_layout", _backend_layout.eager_layout)
        torchlite.reset()
    torch.testing.assert_close(torchlite.compile(conv)(x), conv(x))
