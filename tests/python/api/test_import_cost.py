"""A fresh process pays for nothing heavy it does not use: `import torchlite` and a first
compiled call of a small function import none of torch's compiler stack (Dynamo, Inductor,
sympy, AOTAutograd) beyond what `import torch` itself already loaded (issue 23, part 5)."""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
HEAVY = [
    "torch._dynamo",
    "torch._inductor",
    "sympy",
    "torch._functorch.aot_autograd",
    "torch.fx.experimental.symbolic_shapes",
    "torch._subclasses.fake_tensor",
    "transformers",
    "timm",
    "triton",
]


def _run(code, **env):
    """The last stdout line of `code` run in a fresh process against this tree."""
    env = dict(os.environ, **env)
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def _new_heavy_modules(body):
    """Heavy modules first imported by `body` (run after `import torch`)."""
    code = f"""
import json, sys
import torch
before = set(sys.modules)
{textwrap.dedent(body)}
heavy = {HEAVY!r}
print(json.dumps(sorted(m for m in heavy if m in sys.modules and m not in before)))
"""
    return json.loads(_run(code))


def test_import_torchlite_imports_no_heavy_module():
    assert _new_heavy_modules("import torchlite") == []


def test_a_first_compiled_call_imports_no_heavy_module():
    body = """
    import torchlite
    fn = torchlite.compile(lambda x: torch.sigmoid(x * 2 + 1) * x - torch.tanh(x))
    x = torch.randn(64, 8)
    # NOTE: torch.allclose, not torch.testing.assert_close, which imports sympy itself
    assert torch.allclose(fn(x), torch.sigmoid(x * 2 + 1) * x - torch.tanh(x), atol=1e-6)
    assert torchlite.counters()["graphs"] == 1
    """
    assert _new_heavy_modules(body) == []
