"""Compiled optimizer steps: `torchlite.compile(opt.step)` for SGD, Adam and AdamW.

Each param group's update (per device) is one graph of pointwise ops, written in the order
torch's own `_foreach_*` / single-tensor implementations apply them, that ends with
`state.copy_(new_state)` for every parameter and state tensor it changes. compile_graph fuses
each tensor's update into one kernel, and the `store_in_place` pass makes that kernel store
its results straight into the parameter and state buffers (the graph is compiled with
`inputs_unaliased`, checked here), so a step reads each tensor once and writes it once.

Every number that can change between steps (lr, betas, eps, weight decay, the bias
corrections of Adam's step count) is an element of one float64 tensor input, so an LR
scheduler or a new step count reuses the compiled graph; what changes the ops (maximize,
amsgrad, nesterov, whether weight decay is on, which parameters have gradients and their
layouts) keys the cache. Anything else (closures aside, which run first as eager does: hooks,
fused/differentiable/capturable groups, sparse or complex tensors, SGD's first step that
creates its momentum buffers) runs torch's own step, so the result is always eager's.
"""

import operator
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from torchlite import _C, settings


def optimizer_of(fn: Any) -> torch.optim.Optimizer | None:
    """The optimizer whose step `fn` is (a bound `opt.step`, or the wrapper an LR scheduler
    puts in its place) when torchlite compiles that optimizer's steps; else None."""
    opt, func = getattr(fn, "__self__", None), getattr(fn, "__func__", None)
    if opt is None and getattr(fn, "_wrapped_by_lr_sched", False):
        for cell in getattr(fn, "__closure__", None) or ():
            v = cell.cell_contents
            if isinstance(v, weakref.ref) and isinstance(v(), torch.optim.Optimizer):
                opt = v()
            elif callable(v):
                func = v
    # NOTE: exactly torch's classes and their own step: a subclass may change the update.
    if type(opt) not in _UPDATES or func is not type(opt).step:
        return None
    return opt


def step_route(self: Any, func: Any) -> str | None:
    """How traced code's call of `func` (bound to `self`, an object or None) runs when it is an
    optimizer's step (csrc/capture/optimizer_step.cpp asks at capture): "compiled" (torchlite's
    step), "eager" (torch's own step, never traced: its Python loops update real tensors);
    None when it is not a torch.optim step."""
    fn = func if self is None else types.MethodType(func, self)
    if optimizer_of(fn) is not None:
        return "compiled"
    if getattr(func, "_wrapped_by_lr_sched", False):
        return "eager"
    module = getattr(func, "__module__", None) or ""
    if isinstance(self, torch.optim.Optimizer) and module.startswith("torch.optim"):
        return "eager"
    return None


def step_callable(self: Any, func: Any, route: str) -> Any:
    """What CPython calls at an optimizer_step break (bound to the value the break hands it)."""
    if route == "compiled":
        return step_from_compiled_code
    return _C.DisabledFunction(func)


# NOTE: one compiled step per optimizer for the `opt.step()` calls of compiled code; weak keys, so
# an optimizer (and its compiled graphs) dies with the user's last reference to it.
_STEPS_FROM_COMPILED_CODE: "weakref.WeakKeyDictionary[torch.optim.Optimizer, Any]" = (
    weakref.WeakKeyDictionary()
)


def compiled_step_of(opt: torch.optim.Optimizer) -> "CompiledOptimizerStep | None":
    """The compiled step that `opt.step()` calls in compiled code ran (None before the first)."""
    return _STEPS_FROM_COMPILED_CODE.get(opt)


def _step_from_compiled_code(target: Any, *args: Any, **kwargs: Any) -> Any:
    """What CPython calls at an `optimizer_step` graph break instead of `opt.step(...)`:
    `target` is the optimizer (a step bound from its class) or the LR scheduler's wrapper that
    the instance holds. The guards of the frame pinned the step functions; re-checked here, and
    anything else (a step replaced since) runs as called."""
    if isinstance(target, torch.optim.Optimizer):
        fn = types.MethodType(type(target).step, target)
    else:
        fn = target
    opt = optimizer_of(fn)
    if opt is None:
        return fn(*args, **kwargs)
    step = _STEPS_FROM_COMPILED_CODE.get(opt)
    if step is None:
        step = CompiledOptimizerStep(type(opt).step, opt, None, None, weak=True)
        _STEPS_FROM_COMPILED_CODE[opt] = step
    return step(*args, **kwargs)


# NOTE: torchlite.disable'd: a step that still runs torch's own loop (SGD's first step, hooks)
# runs as plain eager code, not captured frame by frame.
step_from_compiled_code = _C.DisabledFunction(_step_from_compiled_code)


class _Builder:
    """An fx graph of torch ops on meta examples (what graph_from_fx reads)."""

    def __init__(self):
        self.graph = fx.Graph()

    def input(self, name: str, example: torch.Tensor) -> fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = torch.empty_strided(
            example.shape, example.stride(), dtype=example.dtype, device="meta"
        )
        return node

    def op(self, fn: Callable, *args: Any) -> fx.Node:
        vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
        node = self.graph.call_function(fn, tuple(args))
        node.meta["val"] = fn(*vals)
        return node

    def copy_into(self, dst: fx.Node, src: fx.Node) -> None:
        node = self.graph.call_method("copy_", (dst, src))
        node.meta["val"] = dst.meta["val"]


class _Scalars:
    """The per-step numbers: slots of one float64 tensor, read in the graph as scal[k]."""

    def __init__(self, builder: _Builder | None):
        self.values: list[float] = []
        self.builder = builder
        self.node: fx.Node | None = None
        self.slots: dict[str, Any] = {}

    def __call__(self, name: str, value: float) -> Any:
        if name not in self.slots:
            self.slots[name] = len(self.values)
            if self.builder is not None:
                self.slots[name] = self.builder.op(operator.getitem, self.node, len(self.values))
            self.values.append(float(value))
        return self.slots[name]


def _lerp(b: _Builder, start, end, weight, small: bool):
    # NOTE: ATen's lerp: start + w * (end - start) for |w| < 0.5, else end - (end - start) * (1 - w).
    diff = b.op(torch.sub, end, start)
    if small:
        return b.op(torch.add, start, b.op(torch.mul, weight, diff))
    return b.op(torch.sub, end, b.op(torch.mul, diff, weight))


def _adam_update(b, s, t, group, step_key):
    """One parameter's Adam/AdamW update, op for op as torch's _multi_tensor_adam."""
    beta1, beta2 = group["betas"]
    wd = group["weight_decay"]
    g = t["grad"]
    if group["maximize"]:
        g = b.op(torch.neg, g)
    p = t["param"]
    if wd != 0:
        if group["decoupled_weight_decay"]:
            p = b.op(torch.mul, p, s("decay", 1 - _num(group["lr"]) * wd))
        else:
            g = b.op(torch.add, g, b.op(torch.mul, s("wd", wd), p))
    small = abs(1 - _num(beta1)) < 0.5
    m = _lerp(b, t["exp_avg"], g, s("lerp_w", 1 - _num(beta1) if small else _num(beta1)), small)
    v = b.op(torch.mul, t["exp_avg_sq"], s("beta2", beta2))
    v = b.op(
        torch.add, v, b.op(torch.mul, b.op(torch.mul, s("one_minus_beta2", 1 - _num(beta2)), g), g)
    )
    outs = {"param": p, "exp_avg": m, "exp_avg_sq": v}
    if group["amsgrad"]:
        vmax = b.op(torch.maximum, t["max_exp_avg_sq"], v)
        outs["max_exp_avg_sq"] = vmax
        v = vmax
    denom = b.op(torch.div, b.op(torch.sqrt, v), s.slots[f"bc2_sqrt{step_key}"])
    denom = b.op(torch.add, denom, s("eps", group["eps"]))
    upd = b.op(torch.div, b.op(torch.mul, s.slots[f"step_size{step_key}"], m), denom)
    outs["param"] = b.op(torch.add, p, upd)
    return outs


def _adam_scalars(s: _Scalars, group: dict, steps: list[float]) -> list[int]:
    """Bias-correction slots per distinct step count; returns each parameter's step key."""
    beta1, beta2 = (_num(x) for x in group["betas"])
    lr = _num(group["lr"])
    keys, seen = [], {}
    for step in steps:
        if step not in seen:
            k = seen[step] = len(seen)
            s(f"step_size{k}", (lr / (1 - beta1**step)) * -1)
            s(f"bc2_sqrt{k}", (1 - beta2**step) ** 0.5)
        keys.append(seen[step])
    return keys


def _sgd_update(b, s, t, group, step_key):
    """One parameter's SGD update, op for op as torch's _multi_tensor_sgd."""
    g = t["grad"]
    if group["maximize"]:
        g = b.op(torch.neg, g)
    p = t["param"]
    if group["weight_decay"] != 0:
        g = b.op(torch.add, g, b.op(torch.mul, s("wd", group["weight_decay"]), p))
    outs = {}
    momentum = group["momentum"]
    if momentum != 0:
        buf = b.op(torch.mul, t["momentum_buffer"], s("momentum", momentum))
        buf = b.op(torch.add, buf, b.op(torch.mul, s("damp", 1 - group["dampening"]), g))
        outs["momentum_buffer"] = buf
        g = (
            b.op(torch.add, g, b.op(torch.mul, s("momentum", momentum), buf))
            if group["nesterov"]
            else buf
        )
    outs["param"] = b.op(torch.add, p, b.op(torch.mul, s("neg_lr", -_num(group["lr"])), g))
    return outs


def _num(x: Any) -> float:
    return x.item() if isinstance(x, torch.Tensor) else float(x)


# Per optimizer class: the state tensors a step reads and writes, and the update.
_UPDATES: dict[type, tuple[Callable[[dict], list[str]], Callable]] = {
    torch.optim.SGD: (lambda g: ["momentum_buffer"] if g["momentum"] != 0 else [], _sgd_update),
    torch.optim.Adam: (
        lambda g: ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if g["amsgrad"] else []),
        _adam_update,
    ),
    torch.optim.AdamW: (
        lambda g: ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if g["amsgrad"] else []),
        _adam_update,
    ),
}


def _tensor_layouts(tensors: dict[str, list]) -> tuple[bytes, str, bool]:
    """(layout key, sharing, supported) of a step's tensors; the gradients are only read.
    sharing: "" none overlap, "written" only written tensors overlap each other (parameters that
    are views of one buffer: compiled without in-place stores, PassContext::inputs_unaliased
    off), "read_written" a gradient overlaps a tensor the step writes (torch's step reads it
    part-way through its in-place updates: run as torch's step)."""
    flat = [t for ts in tensors.values() for t in ts]
    n = len(tensors["param"])
    return _C.tensor_list_layout(flat, n, 2 * n)


class CompiledOptimizerStep:
    """What torchlite.compile(opt.step) returns: calls like opt.step(closure=None)."""

    def __init__(
        self,
        fn: Callable,
        opt: torch.optim.Optimizer,
        mode: str | None,
        options: dict | None,
        weak: bool = False,
    ):
        # NOTE: `weak`: the step of compiled code's `opt.step()` calls, held by a weak-keyed
        # table on the optimizer; a strong reference back would keep both alive forever.
        self.fn = fn
        self._optimizer = weakref.ref(opt) if weak else (lambda: opt)
        values = settings.resolve(mode, options)
        values["cuda_graphs"] = False  # NOTE: a replay would not see the new scalars tensor
        # NOTE: the parameters' updates are the same kernel over different tensors: one launch
        # for all of them (passes/group_kernels.h) instead of one per parameter.
        if "group_kernels" not in (options or {}):
            values["group_kernels"] = True
        self.settings = values
        self.cache: dict[tuple, Any] = {}
        self.eager_steps = 0  # steps torch's own step ran (for tests and explain)
        self.__wrapped__ = fn

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._optimizer()

    def __call__(self, closure: Callable | None = None) -> Any:
        opt = self.optimizer
        opt._opt_called = True  # NOTE: what an LR scheduler's wrapped step records
        why = self._eager_reason(opt)
        if why:
            return self._eager_step(why, closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            work = [w for group in opt.param_groups for w in self._prepare_group(opt, group)]
            # NOTE: every step, not once per layout set: a gradient re-bound between steps (to
            # another parameter's tensor, a view of a state buffer) changes which inputs share
            # memory without changing a layout. One pass in C++ (guards/tensor_list_layout.h).
            layouts = [_tensor_layouts(w[2]) for w in work]
            for _, sharing, supported in layouts:
                if not supported:
                    return self._eager_step("sparse, complex or non-strided tensors", None, loss)
                if sharing == "read_written":
                    why = "a gradient shares memory with a parameter or optimizer state"
                    return self._eager_step(why, None, loss)
            for w, (layout_key, sharing, _) in zip(work, layouts):
                self._step_tensors(opt, *w, layout_key=layout_key, unaliased=sharing == "")
        return loss

    def _eager_step(self, why: str, closure: Callable | None, loss: Any = None) -> Any:
        self.eager_steps += 1
        self.last_eager_reason = why
        out = type(self.optimizer).step(self.optimizer, closure)
        return out if closure is not None else loss

    def _eager_reason(self, opt) -> str:
        if opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks:
            return "the optimizer has step hooks"
        from torch.optim import optimizer as optim_mod

        if optim_mod._global_optimizer_pre_hooks or optim_mod._global_optimizer_post_hooks:
            return "global optimizer step hooks are registered"
        if (
            getattr(opt, "grad_scale", None) is not None
            or getattr(opt, "found_inf", None) is not None
        ):
            return "a grad scaler drives this optimizer"
        for group in opt.param_groups:
            for flag in ("fused", "differentiable", "capturable"):
                if group.get(flag):
                    return f"a param group has {flag}=True"
            # NOTE: sparse, complex and non-strided tensors are found with the layouts
            # (_tensor_layouts), after torch's lazy state init.
            if type(opt) is torch.optim.SGD and group["momentum"] != 0:
                for p in group["params"]:
                    state = opt.state.get(p)
                    if p.grad is not None and (not state or state.get("momentum_buffer") is None):
                        return "SGD's first step creates the momentum buffers"
        return ""

    def _prepare_group(self, opt, group: dict) -> list[tuple]:
        """(group, device, tensors by role, state names, step counts) per device of the group's
        parameters that have gradients, their state made by torch's own lazy init."""
        names, _ = _UPDATES[type(opt)]
        state_names = names(group)
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return []
        # NOTE: one state lookup per parameter: Tensor.__hash__ is a Python function.
        states = list(map(opt.state.get, params))
        if type(opt) is not torch.optim.SGD:
            # NOTE: torch's own lazy state init (zeros and a float32 step count) and its checks
            # of the group; once every parameter has its state, only the tensor-lr check can
            # still fail (sparse gradients are found with the layouts), and the walk over every
            # parameter in Python cost more than the step's kernels.
            if torch.is_tensor(group["lr"]) or not all(states):
                opt._init_group(group, [], [], [], [], [], [])
                states = [opt.state[p] for p in params]
            if "decoupled_weight_decay" not in group:  # torch before AdamW became Adam's flag
                group = {**group, "decoupled_weight_decay": type(opt) is torch.optim.AdamW}
        by_device: dict[torch.device, list] = {}
        for p, st in zip(params, states):
            by_device.setdefault(p.device, []).append((p, st))
        work = []
        for device, pairs in by_device.items():
            ps = [p for p, _ in pairs]
            tensors = {"param": ps, "grad": [p.grad for p in ps]}
            for name in state_names:
                tensors[name] = [st[name] for _, st in pairs]
            step_t = [st["step"] for _, st in pairs] if "exp_avg" in state_names else []
            work.append((group, device, tensors, state_names, step_t))
        return work

    def _step_tensors(
        self, opt, group, device, tensors, state_names, step_t, layout_key: bytes, unaliased: bool
    ) -> None:
        update = _UPDATES[type(opt)][1]
        params = tensors["param"]
        steps = []
        if step_t:
            # this step's count (stored once it runs); NOTE: one stack, not an item() per tensor
            steps = [v + 1 for v in torch.stack(step_t).tolist()]
        values = _Scalars(None)
        step_keys = _adam_scalars(values, group, steps) if steps else [0] * len(params)
        flat = [t for name in tensors for t in tensors[name]]
        key = (
            tuple(state_names),
            tuple(step_keys),
            _structure(group),
            layout_key,
            unaliased,
        )
        compiled = self.cache.get(key)
        if compiled is None:
            # NOTE: parameters that overlap in memory (views of one buffer, legal for
            # torch.optim) still get kernels, with the copies back run as torch's copy_.
            compiled, order = self._compile(group, tensors, update, step_keys, device, unaliased)
            self.cache[key] = compiled = (compiled, order)
        compiled, order = compiled
        _fill_scalars(values, group, order)
        scal = torch.tensor(values.values, dtype=torch.float64, device=device)
        if step_t:
            torch._foreach_add_(step_t, 1.0)  # NOTE: as torch's _multi_tensor_adam
        compiled(*flat, scal)

    def _compile(self, group, tensors, update, step_keys, device, unaliased):
        b = _Builder()
        inputs = {
            name: [b.input(f"{name}{i}", t) for i, t in enumerate(ts)]
            for name, ts in tensors.items()
        }
        # NOTE: a long enough example while building; its real length is set below.
        scal_example = torch.empty(2 * len(set(step_keys)) + 16, dtype=torch.float64)
        s = _Scalars(b)
        s.node = b.input("scalars", scal_example)
        if "exp_avg" in tensors:
            for k in sorted(set(step_keys)):
                s(f"step_size{k}", 0.0)
                s(f"bc2_sqrt{k}", 0.0)
        copies = []
        n = len(tensors["param"])
        for i in range(n):
            t = {name: nodes[i] for name, nodes in inputs.items()}
            outs = update(b, s, t, group, step_keys[i])
            copies += [(t[name], out) for name, out in outs.items() if out is not t[name]]
        for dst, src in copies:  # NOTE: after every update: in-place writes split fusion segments
            b.copy_into(dst, src)
        b.graph.output(())
        order = list(s.slots)  # slot names in the scalars tensor's order
        s.node.meta["val"] = torch.empty(len(order), dtype=torch.float64, device="meta")
        for node in b.graph.nodes:  # the scalars' examples, now that their number is known
            if node.op == "call_function" and node.target is operator.getitem:
                node.meta["val"] = s.node.meta["val"][node.args[1]]
        gm = fx.GraphModule(torch.nn.Module(), b.graph)
        graph, extras = _C.graph_from_fx(gm, device)
        compiled = _C.FxCompiled(
            graph, extras, self.settings, "default", inputs_unaliased=unaliased
        )
        self.last_compiled = compiled
        return compiled, order


def _structure(group: dict) -> tuple:
    keys = ("maximize", "amsgrad", "nesterov", "decoupled_weight_decay")
    flags = tuple(group.get(k) for k in keys)
    betas = group.get("betas")
    small = abs(1 - _num(betas[0])) < 0.5 if betas else None
    return flags + (group.get("weight_decay", 0) != 0, group.get("momentum", 0) != 0, small)


def _fill_scalars(values: _Scalars, group: dict, order: list[str]) -> None:
    """Every scalar slot of `order`, computed from the group's current hyperparameters."""
    lr = _num(group["lr"])
    wd = group["weight_decay"]
    beta1, beta2 = (_num(x) for x in group.get("betas", (0.0, 0.0)))
    small = abs(1 - beta1) < 0.5
    known = {
        "decay": lambda: 1 - lr * wd,
        "wd": lambda: wd,
        "lerp_w": lambda: 1 - beta1 if small else beta1,
        "beta2": lambda: beta2,
        "one_minus_beta2": lambda: 1 - beta2,
        "eps": lambda: group["eps"],
        "momentum": lambda: group["momentum"],
        "damp": lambda: 1 - group["dampening"],
        "neg_lr": lambda: -lr,
    }
    out = []
    for name in order:
        if name in values.slots:
            out.append(values.values[values.slots[name]])
        else:
            out.append(float(known[name]()))
    values.values = out
