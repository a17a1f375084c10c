"""torchlite graphs as torch.fx GraphModules, so any torch.compile backend can run them.

The C++ core calls backend_bridge (registered through _C.set_backend_bridge) once per captured
graph when the chosen backend is not torchlite's own runner.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from torchlite import _C

_OPS = ("placeholder", "call_function", "call_method")


def _resolve(value: Any, env: dict[str, fx.Node]) -> Any:
    """Replaces _C.NodeRef values (at any nesting depth) by the fx nodes they name."""
    if isinstance(value, _C.NodeRef):
        return env[value.name]
    if isinstance(value, tuple):
        return tuple(_resolve(v, env) for v in value)
    if isinstance(value, list):
        return [_resolve(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, env) for k, v in value.items()}
    return value


def _add_node(graph: fx.Graph, node: dict, env: dict[str, fx.Node]) -> None:
    op, name = node["op"], node["name"]
    if op == "output":
        graph.output(tuple(_resolve(a, env) for a in node["args"]))
        return
    if op not in _OPS:
        raise _C.InternalError(f"fx_interop: node {name} has op {op!r}, expected one of {_OPS}")
    target = name if op == "placeholder" else node["target"]
    args = _resolve(tuple(node["args"]), env)
    kwargs = _resolve(dict(node["kwargs"]), env)
    fx_node = graph.create_node(op, target, args, kwargs, name=name)
    if node.get("meta") is not None:
        fx_node.meta["torchlite"] = node["meta"]
    if node.get("example") is not None:
        # Meta tensors with the real values' shapes, strides and aliasing (as Dynamo's).
        fx_node.meta["example_value"] = node["example"]
    if node.get("source"):
        fx_node.meta["stack_trace"] = node["source"]
    env[name] = fx_node


def graph_to_module(graph: "_C.Graph") -> fx.GraphModule:
    """A GraphModule that takes the graph's inputs positionally and returns a tuple of outputs."""
    fx_graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    for node in graph.nodes():
        _add_node(fx_graph, node, env)
    return fx.GraphModule(torch.nn.Module(), fx_graph)


def backend_bridge(graph: "_C.Graph", backend: Callable, example_inputs: list) -> Callable:
    """Called by the C++ core: compiles one captured graph with a user-chosen backend."""
    compiled = backend(graph_to_module(graph), list(example_inputs))
    if not callable(compiled):
        name = getattr(backend, "__name__", repr(backend))
        raise TypeError(
            f"torchlite backend {name} returned {type(compiled).__name__}, expected a callable "
            "that takes the graph inputs and returns a tuple of outputs"
        )
    return compiled
