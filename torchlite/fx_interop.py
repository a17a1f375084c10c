"""torchlite graphs as torch.fx GraphModules, so any torch.compile backend can run them.

The C++ core calls backend_bridge (registered through _C.set_backend_bridge) once per captured
graph when the chosen backend is not torchlite's own runner.

FX turns a graph into Python source (GraphModule.code), so every target and argument must print
as text that evaluates back to the same object in the generated module, whose globals are only
`torch`, `device`, `inf` and `nan` plus the objects FX registers for call targets. Constants
that do not print that way (functions, classes, numpy values, tensors, typing objects) become
`get_attr` nodes on the module, and call targets FX would print by a name that does not resolve
are called through a small Python function FX holds as a global.
"""

import keyword
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.fx.graph import _is_from_torch, inplace_methods, magic_methods
from torch.fx.node import _get_qualified_name

from torchlite import _C

_OPS = ("placeholder", "call_function", "call_method")

# NOTE: exact types: their repr evaluates back to an equal object of the same type in FX's code
# (floats print inf/nan, which FX imports; torch.Size would come back as a plain tuple).
_LITERAL_TYPES = (
    type(None),
    type(...),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)


def _is_literal(value: Any) -> bool:
    return type(value) in _LITERAL_TYPES


def _resolves_from_torch(qualified_name: str, target: Any) -> bool:
    """True if `qualified_name` (FX's text for a target from torch) reaches `target` again:
    FX prints such targets by name, and the generated code can only reach them through `torch`."""
    parts = qualified_name.split(".")
    if parts[0] != "torch":
        return False
    obj: Any = torch
    for part in parts[1:]:
        if not part.isidentifier():
            return False
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is target


def _printable_target(target: Any) -> bool:
    """True if FX's code generator can name `target` (a call_function target) correctly."""
    try:
        name = _get_qualified_name(target)
    except (AttributeError, RuntimeError):  # NOTE: no __name__, a lambda without source
        return False
    # Objects not from torch are held as globals of the generated code, whatever their name.
    return not _is_from_torch(target) or _resolves_from_torch(name, target)


def _holds_node_ref(value: Any) -> bool:
    if isinstance(value, _C.NodeRef):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_node_ref(v) for v in value)
    if type(value) is slice:
        return any(_holds_node_ref(v) for v in (value.start, value.stop, value.step))
    if type(value) is dict:
        return any(_holds_node_ref(v) for v in value.values())
    return False


def _operand_needs_name(op: str, target: Any, first: Any) -> bool:
    """True if FX would print the constant first operand where a literal does not parse or binds
    differently: `1.__radd__(x)`, `1 += y`, `-2 ** x` (which is -(2 ** x))."""
    if _holds_node_ref(first):
        return False
    if op == "call_method":
        return True
    if op != "call_function" or getattr(target, "__module__", "") != "_operator":
        return False
    name = getattr(target, "__name__", "")
    return name in inplace_methods or (name in magic_methods and repr(first).startswith("-"))


def _rebinds_value(op: str, target: Any, args: tuple) -> bool:
    """True for an in-place operator on a graph value that is not a tensor: FX prints it as
    `a += b; iadd = a`, which for an immutable `a` would change what later readers of `a` see."""
    if op != "call_function" or getattr(target, "__module__", "") != "_operator":
        return False
    if getattr(target, "__name__", "") not in inplace_methods or not args:
        return False
    first = args[0]
    return (
        isinstance(first, fx.Node)
        and first.op != "get_attr"
        and not isinstance(first.meta.get("example_value"), torch.Tensor)
    )


def _call_through(target: Callable) -> Callable:
    """A plain function calling `target`, for targets FX would print by an unusable name
    (an operator's C binding named "", a callable object with no __name__)."""

    def call(*args, **kwargs):
        return target(*args, **kwargs)

    name = getattr(target, "__name__", None) or type(target).__name__
    call.__name__ = call.__qualname__ = name if name.isidentifier() else "call"
    call.__module__ = __name__
    return call


class _Exporter:
    """Builds one fx.Graph from a torchlite graph's node dicts."""

    def __init__(self) -> None:
        self.graph = fx.Graph()
        self.root = torch.nn.Module()
        self.env: dict[str, fx.Node] = {}
        self.constants: dict[int, fx.Node] = {}  # id(value) -> its get_attr node
        self.targets: dict[int, Callable] = {}  # id(target) -> its call-through function

    def constant(self, value: Any, *, fresh: bool = False) -> fx.Node:
        """A get_attr node reading `value` from the module (one per object, unless `fresh`)."""
        node = self.constants.get(id(value))
        if node is None or fresh:
            name = node.target if node is not None else f"_tl_const{len(self.constants)}"
            setattr(self.root, name, value)  # NOTE: the module keeps `value`, so its id stays
            node = self.graph.get_attr(name)
            self.constants.setdefault(id(value), node)
        return node

    def arg(self, value: Any) -> Any:
        """`value` with NodeRefs replaced by fx nodes and unprintable leaves by get_attr nodes."""
        if isinstance(value, _C.NodeRef):
            return self.env[value.name]
        if type(value) in (tuple, list):
            return type(value)(self.arg(v) for v in value)
        if isinstance(value, tuple) and hasattr(value, "_fields") and _holds_node_ref(value):
            return type(value)(*(self.arg(v) for v in value))  # FX prints it as Type(...)
        if type(value) is slice:
            return slice(self.arg(value.start), self.arg(value.stop), self.arg(value.step))
        if type(value) is dict and (all(_is_literal(k) for k in value) or _holds_node_ref(value)):
            return {k: self.arg(v) for k, v in value.items()}
        if _is_literal(value):
            return value
        return self.constant(value)

    def target(self, target: Any) -> Callable:
        return target if _printable_target(target) else self.call_through(target)

    def call_through(self, target: Callable) -> Callable:
        if id(target) not in self.targets:
            self.targets[id(target)] = _call_through(target)
        return self.targets[id(target)]

    def call_args(self, op: str, target: Any, args: tuple) -> tuple:
        args = tuple(args)
        if args and _operand_needs_name(op, target, args[0]):
            # NOTE: FX prints `a += b; iadd = a`, which rebinds the name `a`: an in-place
            # operator's constant gets a name of its own, or a later reader of the same
            # constant would see the result (T5's `buckets = 0; buckets += ...` twice).
            return (self.constant(args[0], fresh=True), *self.arg(args[1:]))
        return self.arg(args)

    def add(self, node: dict) -> None:
        op, name = node["op"], node["name"]
        if op == "output":
            self.graph.output(self.arg(tuple(node["args"])))
            return
        if op not in _OPS:
            raise _C.InternalError(f"fx_interop: node {name} has op {op!r}, expected one of {_OPS}")
        if op == "placeholder":
            fx_node = self.graph.placeholder(_identifier(name))
            fx_node.target = fx_node.name  # NOTE: node names are unique; parameter names must be
        else:
            target = self.target(node["target"]) if op == "call_function" else node["target"]
            args = self.call_args(op, node["target"], node["args"])
            if _rebinds_value(op, target, args):
                target = self.call_through(target)
            kwargs = self.arg(dict(node["kwargs"]))
            fx_node = self.graph.create_node(op, target, args, kwargs, name=name)
        if node.get("meta") is not None:
            fx_node.meta["torchlite"] = node["meta"]
        if node.get("example") is not None:
            # Meta tensors with the real values' shapes, strides and aliasing (as Dynamo's).
            fx_node.meta["example_value"] = node["example"]
        if node.get("source"):
            fx_node.meta["stack_trace"] = node["source"]
        self.env[name] = fx_node


def _identifier(name: str) -> str:
    """A placeholder name usable as a parameter of forward(self, ...)."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "input"
    if out[0].isdigit() or keyword.iskeyword(out) or out == "self":
        out = "_" + out
    return out


def graph_to_module(graph: "_C.Graph") -> fx.GraphModule:
    """A GraphModule that takes the graph's inputs positionally and returns a tuple of outputs."""
    exporter = _Exporter()
    for node in graph.nodes():
        exporter.add(node)
    return fx.GraphModule(exporter.root, exporter.graph)


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
