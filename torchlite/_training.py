"""Compiled training: the backward of a captured graph, from torch's own derivative formulas.

When autograd records a captured graph (grad mode on, an input requires grad), compile_graph
(csrc/pipeline/compile_graph.cpp) calls csrc/python/bind_training.cpp, which calls
`trace_joint` here: the graph runs on meta tensors under `_Recorder`, a dispatch mode that
records every ATen op autograd runs below it, forward then `torch.autograd.grad` (torch's
derivative formulas, with `torch._decomp` decompositions for backward ops so they fuse). The
result is one functional joint graph (primals, tangents) -> (outputs, input gradients). C++
splits it (csrc/passes/partition_joint.cpp), compiles both halves through compile_graph and
calls `make_training_function`, whose `torch.autograd.Function` links them. All of this runs
once per compile; a call runs the compiled forward, and backward the compiled backward.
"""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from torchlite import _C, _asserts
from torchlite.fx_interop import graph_to_module

aten = torch.ops.aten


def _same_device(a: torch.device, b: torch.device) -> bool:
    """cuda and cuda:0 are one device when cuda:0 is current."""
    if a.type != b.type:
        return False
    if a.index is None or b.index is None:
        current = torch.cuda.current_device() if a.type == "cuda" else 0
        return (a.index if a.index is not None else current) == (
            b.index if b.index is not None else current
        )
    return a.index == b.index


class _Unsupported(Exception):
    """The graph cannot run as a compiled forward and backward; it runs op by op instead."""


# Backward ops (and forward ops without a derivative-friendly form) rewritten into ATen ops
# torchlite lowers, so the backward fuses like the forward.
# NOTE: embedding_dense_backward stays torch's op: its decomposition is an accumulating
# index_put that torchlite does not fuse, and on CUDA it serializes on repeated indices (BERT's
# token-type embedding sends all 4096 rows into one: its three embeddings took 1.98 ms on an
# H200 against 0.22 ms for torch's sorted kernel).
_DECOMPOSED = [
    aten.threshold_backward,
    aten.gelu_backward,
    aten.silu_backward,
    aten.tanh_backward,
    aten.sigmoid_backward,
    aten.hardtanh_backward,
    aten.leaky_relu_backward,
    aten.elu_backward,
    aten._softmax_backward_data,
    aten._log_softmax_backward_data,
    aten.native_layer_norm_backward,
    # NOTE: as torch's op, each layer norm of a training forward was an extern call between
    # generated kernels (GPT-2: the residual add before it and the half cast after it were
    # kernels of their own); decomposed it is var_mean and pointwise math that fuse with them,
    # mean and rstd coming out of the same kernel for backward.
    aten.native_layer_norm,
    aten.native_batch_norm,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional,
    aten.cudnn_batch_norm,
    aten.native_batch_norm_backward,
    aten.cudnn_batch_norm_backward,
    aten.mse_loss_backward,
    aten.nll_loss_backward,
    aten.silu,
]


def _nll_loss_backward_without_one_hot(torch_decomposition):
    """aten.nll_loss_backward for (N, C) inputs as one pointwise expression.

    NOTE: torch._decomp's version fills a dense zero gradient and scatters -1 into it: two extern
    ops writing the whole (N, C) gradient (GPT-2's 4096x50257 logits: 823 MB of float32 a step)
    that the softmax backward then reads twice. Comparing each column with the class index is
    pointwise, so the loss gradient fuses into log_softmax's backward. Other shapes keep torch's
    decomposition."""

    def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
        if self.dim() != 2 or target.dim() != 1:
            return torch_decomposition(
                grad_output, self, target, weight, reduction, ignore_index, total_weight
            )
        scale = grad_output / total_weight if reduction == 1 else grad_output  # NOTE: 1 is mean
        if reduction == 0:  # NOTE: none: one gradient per row
            scale = scale.unsqueeze(1)
        if weight is not None:
            scale = scale * weight.reshape(1, -1)
        index = target.unsqueeze(1)
        index = torch.where(index != ignore_index, index, -1)  # NOTE: -1 matches no class
        classes = torch.arange(self.shape[1], device=self.device)
        grad = torch.where(classes == index, -scale, 0)
        return grad if grad.dtype == self.dtype else grad.to(self.dtype)

    return nll_loss_backward


def _statistics_dtype(input: torch.Tensor, device: torch.device) -> torch.dtype:
    """The dtype a training batch norm reduces its batch statistics in: float64 on the CPU,
    the computation dtype (float32 for reduced floats) elsewhere, as eager's kernels do.

    NOTE: ATen's CPU kernel accumulates mean and squared deviations in double; CUDA's Welford
    kernel in float. float32 statistics over a few thousand points per channel are a few ulps
    off the rounded exact ones, and networks whose backward amplifies their outputs' rounding
    (timm's legacy_xception, skresnet34) then drift from float64 further than eager does."""
    computation = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    if torch.device(device).type == "cpu" and computation == torch.float32:
        return torch.float64
    return computation


def _training_batch_norm(torch_decomposition, device, kind: str):
    """A training batch norm: statistics reduced in `_statistics_dtype` (rounded once to the
    computation dtype, as ATen's saved mean and rstd), running statistics updated from them and
    the output as `x * alpha + beta` per channel (alpha = rstd * weight, beta = bias - mean *
    alpha), as ATen's kernels compute it, instead of torch._decomp's `(x - mean) * rstd * weight
    + bias`. kind: "mutating" (native_batch_norm, _native_batch_norm_legit: running statistics
    copied into), "functional" (_native_batch_norm_legit_functional: returned) or "no_stats".
    Eval mode and 1-d inputs keep torch's decomposition.

    NOTE: the two output roundings differ by an ulp, and some networks' backward amplifies the
    decomposed form's: timm's hardcorenas_b in train mode had input gradients 4.0e-3 from
    float64 (eager float32 5.8e-7; torch.compile's decomposition path the same 4.0e-3), 6.2e-7
    in this form. It is also one multiply-add an element instead of four ops."""

    def batch_norm(input, weight, bias, *rest):
        if kind == "no_stats":
            running_mean = running_var = None
            training, momentum, eps = rest
        else:
            running_mean, running_var, training, momentum, eps = rest
        if not training or input.dim() < 2:
            return torch_decomposition(input, weight, bias, *rest)
        computation = (
            torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
        )
        dims = [0, *range(2, input.dim())]
        statistics = _statistics_dtype(input, device)
        var, mean = torch.var_mean(input.to(statistics), dim=dims, correction=0)
        rstd = torch.rsqrt(var + eps).to(computation)
        new_mean = new_var = None
        if running_mean is not None:
            new_mean = (momentum * mean + (1 - momentum) * running_mean).to(running_mean.dtype)
        if running_var is not None:
            n = input.numel() / input.shape[1]
            unbiased = var * (n / (n - 1))
            new_var = (momentum * unbiased + (1 - momentum) * running_var).to(running_var.dtype)
        mean = mean.to(computation)
        shape = [1, -1] + [1] * (input.dim() - 2)
        # NOTE: on the CPU beta = bias - mean * alpha and `x * alpha + beta` each round once,
        # as ATen's kernel (compiled with contraction: fmas) does: an x far from its channel's
        # mean (mean / std of 200) makes x * alpha cancel against beta, and rounding the products
        # first made the output 7x eager's error from float64. A product of two float32 numbers
        # is exact in float64, so computing them there and rounding is that fma. (CUDA's
        # compilers contract the float32 form by default.)
        affine = statistics if statistics == torch.float64 else computation
        alpha = rstd if weight is None else rstd * weight.to(computation)
        ma = mean.to(affine) * alpha.to(affine)
        beta = (-ma if bias is None else bias.to(affine) - ma).to(computation)
        y = input.to(affine) * alpha.to(affine).reshape(shape) + beta.to(affine).reshape(shape)
        y = y.to(input.dtype)
        if kind == "functional":
            return y, mean, rstd, new_mean, new_var
        if kind == "mutating":
            if running_mean is not None:
                running_mean.copy_(new_mean)
            if running_var is not None:
                running_var.copy_(new_var)
        return y, mean, rstd

    return batch_norm


def _decompositions(device: torch.device) -> dict:
    from torch._decomp import get_decompositions

    table = get_decompositions(_DECOMPOSED)
    table[aten.nll_loss_backward.default] = _nll_loss_backward_without_one_hot(
        table[aten.nll_loss_backward.default]
    )
    for op, kind in (
        (aten.native_batch_norm.default, "mutating"),
        (aten._native_batch_norm_legit.default, "mutating"),
        (aten._native_batch_norm_legit_functional.default, "functional"),
        (aten._native_batch_norm_legit.no_stats, "no_stats"),
    ):
        table[op] = _training_batch_norm(table[op], device, kind)
    return table


def _nll_loss_of_log_softmax(
    log_softmax_input: dict, log_probs, target, weight, reduction, ignore_index
):
    """aten.nll_loss_forward of a log_softmax's (N, C) result over classes, as the row's
    logsumexp minus its target's value (mean or sum, no class weights), else None.

    NOTE: nll_loss_forward is an extern op: it read the whole log_softmax result, so the forward
    made it in memory, float32 for half-precision logits (GPT-2 8x512's 4096x50257: 823 MB
    beside everything saved for backward, the forward's peak, where torch.compile makes none).
    logsumexp and the where-sum picking the target are reductions that read the logits
    themselves and fuse their cast; the log_softmax is then read only by backward, which
    recomputes it from the saved logits (passes/partition_joint.h)."""
    source = log_softmax_input.get(id(log_probs))
    if source is None or weight is not None or reduction not in (1, 2):  # NOTE: 1 mean, 2 sum
        return None
    x, dim = source
    if x.dim() != 2 or target.dim() != 1 or dim not in (1, -1):
        return None
    index = target.unsqueeze(1)
    valid = index != ignore_index
    index = torch.where(valid, index, -1)  # NOTE: -1 matches no class
    classes = torch.arange(x.shape[1], device=x.device)
    picked = torch.where(classes == index, x, 0).sum(1)
    losses = torch.where(valid.squeeze(1), torch.logsumexp(x, [1]) - picked, 0)
    total = valid.sum().to(x.dtype)
    out = losses.sum()
    return (out / total if reduction == 1 else out), total


def _method(name: str):
    return ("method", name)


# ATen overloads whose torch-level function takes the same arguments: recorded as that
# function, so torchlite's lowering rules (written for torch-level ops) fuse them.
_SAME_ARGS = {
    **{getattr(aten, n).Tensor: getattr(torch, n) for n in ("add", "sub", "mul", "div")},
    **{getattr(aten, n).Scalar: getattr(torch, n) for n in ("add", "sub", "mul", "div")},
    **{
        getattr(aten, n).default: getattr(torch, n)
        for n in (
            "neg",
            "exp",
            "log",
            "sqrt",
            "rsqrt",
            "tanh",
            "sigmoid",
            "relu",
            "abs",
            "sin",
            "cos",
            "reciprocal",
            "erf",
            "log1p",
            "expm1",
            "sign",
            "maximum",
            "minimum",
            "logical_not",
            "permute",
            "t",
            "unsqueeze",
            "mm",
            "addmm",
            "bmm",
            "amax",
        )
    },
    **{getattr(aten, n).default: getattr(torch, n) for n in ("logsumexp",)},
    **{getattr(aten, n).Scalar: getattr(torch, n) for n in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{getattr(aten, n).Tensor: getattr(torch, n) for n in ("eq", "ne", "lt", "le", "gt", "ge")},
    aten.pow.Tensor_Scalar: torch.pow,
    aten.pow.Tensor_Tensor: torch.pow,
    aten.where.self: torch.where,
    aten.where.ScalarSelf: torch.where,
    aten.where.ScalarOther: torch.where,
    aten.where.Scalar: torch.where,
    aten.clamp_min.default: torch.clamp_min,
    aten.clamp_max.default: torch.clamp_max,
    aten.masked_fill.Scalar: torch.masked_fill,
    aten.transpose.int: torch.transpose,
    aten.squeeze.dim: torch.squeeze,
    aten.mean.dim: torch.mean,
    aten.var_mean.dim: torch.var_mean,
    aten.var_mean.correction: torch.var_mean,
    aten.gelu.default: F.gelu,
    # NOTE: joins and splits (rotary embeddings' `cat((-x2, x1))` and chunk's backward): as
    # ATen calls they ran as torch's copy kernels, four per attention layer and step.
    aten.cat.default: torch.cat,
    aten.stack.default: torch.stack,
    aten.split.Tensor: torch.split,
    aten.split_with_sizes.default: torch.split_with_sizes,
    aten.unbind.int: torch.unbind,
    aten.select.int: torch.select,
    aten.view.default: _method("view"),
    aten._unsafe_view.default: _method("view"),
    aten.expand.default: _method("expand"),
}


# Ops that return their input's value (autograd bookkeeping): recorded as no node.
_IDENTITIES = {aten.detach.default, aten.alias.default, aten.lift_fresh.default}


def _plain_cast(func, args: tuple, kwargs: dict):
    """The dtype when an ATen call is a plain dtype cast on the same device and layout (what
    `Tensor.to(dtype)` records, so it fuses), else None.

    NOTE: decompositions upcast half-precision values this way (gelu_backward's and
    native_layer_norm_backward's float32 math): as extern ops, BERT-base's backward ran 100 such
    copies a step. aten.to.dtype is `Tensor.to(dtype)` itself; _to_copy always copies, so it is
    one only when the dtype changes (then `.to` copies too)."""
    if func is aten.to.dtype and not kwargs and len(args) >= 2:
        # NOTE: non_blocking and copy off; a memory format changes strides only, not values
        # (decompositions ask for contiguous_format).
        non_blocking, copy = (*args[2:4], False, False)[:2]
        return args[1] if not non_blocking and not copy else None
    if func is not aten._to_copy.default or args[1:] or "dtype" not in kwargs:
        return None
    src, dtype = args[0], kwargs["dtype"]
    if not isinstance(src, torch.Tensor) or dtype == src.dtype:
        return None
    extra = set(kwargs) - {"dtype", "layout", "device", "pin_memory"}
    same_place = (
        kwargs.get("layout") in (None, torch.strided)
        and src.layout == torch.strided
        and kwargs.get("device") in (None, src.device)
        and not kwargs.get("pin_memory")
    )
    return dtype if not extra and same_place else None


def _torch_level(func, args: tuple, kwargs: dict):
    """(target, args, kwargs) to record for an ATen call: a torch-level equivalent when one is
    known to take the same arguments, else the ATen overload itself (run as an extern op)."""
    target = _SAME_ARGS.get(func)
    if target is not None:
        return target, args, kwargs
    if func is aten.sum.dim_IntList and args[1]:
        keepdim = args[2] if len(args) > 2 else False
        return torch.sum, (args[0], list(args[1]), keepdim), kwargs
    if func is aten.sum.default and not kwargs:
        return torch.sum, args, {}
    if func in (aten._softmax.default, aten._log_softmax.default) and not args[2]:
        fn = torch.softmax if func is aten._softmax.default else torch.log_softmax
        return fn, args[:2], {}
    if func is aten._to_copy.default and set(kwargs) == {"dtype"}:
        return _method("to"), (args[0], kwargs["dtype"]), {}
    dtype = _plain_cast(func, args, kwargs)
    if dtype is not None:
        return _method("to"), (args[0], dtype), {}
    if func is aten.clone.default and not kwargs:
        return torch.clone, args, {}
    # NOTE: tanh's and sigmoid's backward decompositions end in `(1 - y * y).conj_physical()`:
    # as an extern copy it split GPT-2's gelu backward into two kernels around a torch copy of
    # a float32 tensor the size of the MLP's activations. Of a real tensor it is a copy, which
    # fuses (and stays a tensor of its own where the graph returns it).
    if func is aten.conj_physical.default and not args[0].is_complex() and not kwargs:
        return torch.clone, args, {}
    if func is aten.rsub.Scalar and len(args) <= 3:
        # NOTE: alpha is positional in the ATen schema, keyword-only in torch.rsub
        return torch.rsub, args[:2], {**kwargs, **({"alpha": args[2]} if args[2:] else {})}
    narrow = _slice_as_narrow(func, args, kwargs)
    if narrow is not None:
        return torch.narrow, narrow, {}
    pad = _slice_backward_as_pad(func, args, kwargs)
    if pad is not None:
        return torch.constant_pad_nd, pad, {}
    return func, args, kwargs


def _slice_backward_as_pad(func, args: tuple, kwargs: dict):
    """`aten.slice_backward(g, sizes, dim, start, end, 1)` (g placed into zeros) as
    constant_pad_nd's arguments, else None: the pad lowers as a fused select."""
    if func is not aten.slice_backward.default or kwargs or len(args) != 6:
        return None
    g, sizes, dim, start, end, step = args
    if not isinstance(g, torch.Tensor) or step != 1:
        return None
    if not all(type(v) is int for v in (dim, start, end, *sizes)):
        return None
    rank, size = len(sizes), sizes[dim]
    dim = dim + rank if dim < 0 else dim
    lo = min(max(start + size if start < 0 else start, 0), size)
    if lo + g.shape[dim] > size:
        return None
    pad = [0] * (2 * (rank - dim))
    pad[-2], pad[-1] = lo, size - lo - g.shape[dim]
    return g, pad, 0.0


def _slice_as_narrow(func, args: tuple, kwargs: dict):
    """`aten.slice.Tensor(x, dim, start, end, 1)` as torch.narrow's arguments (bounds clamped
    as slicing clamps them), else None: torch has no slice function, and narrow lowers as a
    view."""
    if func is not aten.slice.Tensor or kwargs:
        return None
    if len(args) > 5:
        return None
    x, dim, start, end, step = (*args, *(None, 0, None, None, 1)[len(args) :])
    if not isinstance(x, torch.Tensor) or step != 1 or x.dim() == 0:
        return None
    if not all(v is None or type(v) is int for v in (dim, start, end)):
        return None  # NOTE: symbolic bounds keep the ATen op
    size = x.shape[dim]
    if type(size) is not int:
        return None
    lo, hi = (0 if start is None else start), (size if end is None else end)
    lo, hi = (lo + size if lo < 0 else lo), (hi + size if hi < 0 else hi)
    lo, hi = min(max(lo, 0), size), min(max(hi, 0), size)
    return x, dim, lo, max(hi - lo, 0)


def _mutated_args(func) -> list[int]:
    return [
        i
        for i, a in enumerate(func._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]


# In-place ops whose out-of-place variant has another overload name.
_FUNCTIONAL_OVERLOADS = {aten.bernoulli_.float: aten.bernoulli.p}


def _with_defaults(func, args: tuple) -> tuple:
    """`args` with the positional arguments the call left out filled from func's schema."""
    schema = [a for a in func._schema.arguments if not a.kwarg_only]
    missing = schema[len(args) :]
    if not missing or any(not a.has_default_value() for a in missing):
        return args
    return (*args, *(a.default_value for a in missing))


def _functional_variant(func):
    """aten.add_.Tensor -> aten.add.Tensor, aten.copy_.default -> aten.copy.default."""
    if func in _FUNCTIONAL_OVERLOADS:
        return _FUNCTIONAL_OVERLOADS[func]
    name = func.overloadpacket.__name__
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(aten, name[:-1], None)
    return getattr(packet, func._overloadname, None) if packet is not None else None


# Ops that update running statistics inside their kernel: eager leaves the version counter of
# those buffers alone (two training forwards, then the first one's backward, works), so the
# compiled forward's write into them must too (make_training_function sets them back).
_QUIET_MUTATIONS = {
    aten.native_batch_norm.default,
    aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit_functional.default,
    aten.cudnn_batch_norm.default,
}

# torch.tensor(data) calls in a graph up to this size are made again by the compiled forward.
_MAX_CONSTANT_ELEMENTS = 4096


class _Recorder(TorchDispatchMode):
    """Records every ATen op run under it into an fx graph of functional ops.

    Values are tracked by tensor identity (the tensors are kept alive, so ids stay unique).
    In-place ops are recorded as their out-of-place variant and rebind the tensor to the new
    value; a mutated graph input is remembered, and the compiled forward writes its new value
    into it (passes/partition_joint.h).
    """

    # NOTE: torchlite's own mode: compiled frames run under it (guards/global_state.cpp).
    _torchlite_transparent_mode = True

    def __init__(self, device: torch.device, decompositions: dict) -> None:
        super().__init__()
        self.graph = fx.Graph()
        self.device = device
        self.decompositions = decompositions
        self.env: dict[int, fx.Node] = {}
        self.keep: list[torch.Tensor] = []
        self.alias_groups: dict[int, set[int]] = {}  # id -> ids sharing its memory (views)
        self.stale: set[int] = set()  # views of a tensor mutated since: reading one is unsupported
        self.inputs: dict[int, int] = {}  # id(primal) -> its index
        self.mutated: set[int] = set()  # indices of primals mutated in place
        self.quiet: set[int] = set()  # of those, mutated where eager keeps the version counter
        self.quiet_depth = 0  # > 0 inside a decomposition of an op in _QUIET_MUTATIONS
        self.log_softmax_input: dict[int, tuple] = {}  # id(log_softmax result) -> (input, dim)

    def bind(self, t: torch.Tensor, node: fx.Node, *, example: bool = True) -> None:
        self.env[id(t)] = node
        self.keep.append(t)
        if example:
            node.meta["val"] = t

    def input(self, t: torch.Tensor, name: str) -> None:
        self.bind(t, self.graph.placeholder(name))

    def value(self, a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            if id(a) in self.stale:
                raise _Unsupported("a view of a tensor mutated in place is read afterwards")
            node = self.env.get(id(a))
            if node is not None:
                return node
            if a.device.type != "meta" and a.numel() == 1:
                return a.clone()  # NOTE: a real scalar tensor made by a decomposition
            raise _Unsupported(
                f"a {a.device.type} tensor of shape {tuple(a.shape)} that the graph did not make "
                "reaches an op"
            )
        if isinstance(a, torch.device) and a.type == "meta":
            return self.device
        return a

    def alias(self, *values: Any) -> None:
        """Records that the tensors among `values` share memory (a view op's input and output)."""
        group: set[int] = set()
        for v in values:
            if isinstance(v, torch.Tensor):
                group |= self.alias_groups.get(id(v), {id(v)})
        for i in group:
            self.alias_groups[i] = group

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if isinstance(device, torch.device) and _same_device(device, self.device):
            # NOTE: a factory of the graph (torch.zeros(..., device=x.device)) runs on meta
            # like everything else; value() records the graph's device for it.
            kwargs = {**kwargs, "device": torch.device("meta")}
        if func is aten.lift_fresh.default and args[0].device.type != "meta":
            return self.record_constant(args[0])
        if func is aten.nll_loss_forward.default:
            with self:
                out = _nll_loss_of_log_softmax(self.log_softmax_input, *args, **kwargs)
            if out is not None:
                return out
        if func is aten.bernoulli_.float and self.bool_draw(*args, **kwargs):
            return args[0]
        if func is aten.bernoulli.p:
            out = self.bool_draw(*args, **kwargs, functional=True)
            if out is not None:
                return out
        decomposition = self.decompositions.get(func)
        if decomposition is not None:
            quiet = func in _QUIET_MUTATIONS
            self.quiet_depth += quiet
            try:
                with self:
                    out = decomposition(*args, **kwargs)
            finally:
                self.quiet_depth -= quiet
            if out is not NotImplemented:
                return out
        if func in _IDENTITIES:
            out = func(*args, **kwargs)
            self.bind(out, self.value(args[0]), example=False)  # NOTE: same value: no node
            self.alias(args[0], out)
            return out
        mutated = _mutated_args(func)
        if mutated and not func._schema.is_mutable:
            mutated = []
        if mutated:
            return self.record_mutation(func, args, kwargs, mutated)
        out = func(*args, **kwargs)
        self.record(func, args, kwargs, out)
        if func is aten._log_softmax.default:
            self.log_softmax_input[id(out)] = (args[0], args[1])
        return out

    def bool_draw(self, target: torch.Tensor, p: float = 0.5, generator=None, functional=False):
        """`target.bernoulli_(p)` of a floating CPU tensor the graph made, recorded as a draw
        into a bool tensor cast to target's dtype: True when so recorded. `functional`:
        `torch.bernoulli(target, p)` so recorded, its result (None where not).

        NOTE: eager's CPU dropout multiplies by `empty_like(x).bernoulli_(1 - p) / (1 - p)`,
        which autograd saves for backward in x's dtype (4 bytes an element in float32), where
        AOTAutograd saves a bool mask (1 byte) and recomputes the scaled mask from it. Drawn as
        bool, the scaled mask is a cast and a division of the draw, which the partitioner
        recomputes from it (passes/partition_joint.h). torch's CPU bernoulli_ draws the same
        bits (and advances the generator alike) for every dtype: eager's values are kept.
        CUDA's dropout is native_dropout, whose mask is bool already; CUDA's bernoulli_ is
        left alone (its draws by dtype are not checked here)."""
        others = self.alias_groups.get(id(target), {id(target)}) - {id(target)}
        if (
            generator is not None
            or self.device.type != "cpu"
            or not target.is_floating_point()
            or not isinstance(p, (int, float))
            or id(target) not in self.env
            or (not functional and (id(target) in self.inputs or others))
        ):
            return None if functional else False
        with self:
            draw = torch.empty_like(target, dtype=torch.bool).bernoulli_(p)
            value = draw.to(target.dtype)
        if functional:
            return value
        self.bind(target, self.env[id(value)], example=False)
        return True

    def copied_value(self, target: torch.Tensor, src: Any) -> bool:
        """`target.copy_(src)` recorded as target's new value being src's (cast to target's
        dtype, broadcast to its shape): True when so recorded.

        NOTE: functional aten.copy(target, src) is an extern op that clones target to overwrite
        it (batch norm's running-stat updates: a clone and two copies a statistic a step); the
        value alone is what the graph needs, and the write into an input happens once, at the
        end of the compiled forward (passes/partition_joint.h)."""
        if not isinstance(src, torch.Tensor) or id(src) not in self.env:
            return False
        if src.device.type != "meta" or src.dtype.is_complex != target.dtype.is_complex:
            return False
        with self:
            value = src if src.dtype == target.dtype else src.to(target.dtype)
            if value.shape != target.shape:
                value = value.expand(target.shape)
        self.bind(target, self.env[id(value)], example=False)
        return True

    def record_constant(self, t: torch.Tensor) -> torch.Tensor:
        """`torch.tensor(data)` in the graph (a real tensor lifted into the trace): recorded
        as the same call, so the compiled forward makes it again; a meta stand-in flows on."""
        if t.numel() > _MAX_CONSTANT_ELEMENTS:
            raise _Unsupported(f"the graph makes a constant tensor of {t.numel()} elements")
        node = self.graph.call_function(
            torch.tensor, (t.tolist(),), {"dtype": t.dtype, "device": t.device}
        )
        out = torch.empty(t.shape, dtype=t.dtype, device="meta")
        self.bind(out, node)
        return out

    def record(self, func, args, kwargs, out) -> None:
        target, args, kwargs = _torch_level(func, args, kwargs)
        fx_args, fx_kwargs = tree_map(self.value, args), tree_map(self.value, kwargs)
        if isinstance(target, tuple):
            node = self.graph.call_method(target[1], fx_args, fx_kwargs)
        else:
            node = self.graph.call_function(target, fx_args, fx_kwargs)
        returns = func._schema.returns
        if any(r.alias_info is not None for r in returns):
            self.alias(*tree_flatten(args)[0], *tree_flatten(out)[0])
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
            return
        node.meta["val"] = out
        if isinstance(out, (tuple, list)):
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    self.bind(item, self.graph.call_function(operator.getitem, (node, i)))

    def record_mutation(self, func, args, kwargs, mutated: list[int]):
        functional = _functional_variant(func)
        if functional is None or mutated != [0] or kwargs.get("out") is not None:
            raise _Unsupported(f"{func} mutates its arguments")
        target = args[0]
        others = self.alias_groups.get(id(target), {id(target)}) - {id(target)}
        if any(i in self.inputs for i in others):
            raise _Unsupported(f"{func} mutates a view of an input")
        self.stale |= others
        if id(target) in self.inputs:
            self.mutated.add(self.inputs[id(target)])
            if self.quiet_depth:
                self.quiet.add(self.inputs[id(target)])
        out = func(*args, **kwargs)
        if func is aten.copy_.default and self.copied_value(target, args[1]):
            return out
        args = _with_defaults(func, args)  # NOTE: bernoulli_(x) means bernoulli(x, 0.5)
        node_out = functional(*args, **kwargs)  # NOTE: only for its metadata
        self.record(functional, args, kwargs, node_out)
        node = self.env[id(node_out)]
        self.bind(target, node)
        return out


# torch functions whose ATen decomposition depends on the device (see _DeviceChoices).
_CHOSEN_BY_DEVICE = {torch._C._nn.scaled_dot_product_attention, F.dropout, torch.dropout}

# Ops a sub-trace logs that change nothing (device queries, autograd's saved-tensor detaches).
_NOT_REPLAYED = {aten.detach.default, aten.alias.default}


class _OpLog(TorchDispatchMode):
    """Logs the ATen ops run under it (below autograd) with their arguments and results."""

    # NOTE: torchlite's own mode: compiled frames run under it (guards/global_state.cpp).
    _torchlite_transparent_mode = True

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.ops.append((func, args, kwargs, out))
        return out


class _DeviceChoices(TorchFunctionMode):
    """Ops whose ATen decomposition torch chooses by device run as on the real device.

    On meta tensors torch's SDPA picks its math path (matmuls and a softmax) and dropout its
    generic path (bernoulli_ noise), whatever the real device would run. So each such call runs
    once more on fake tensors of the real device, where torch's own choice (flash,
    memory-efficient, cuDNN or CPU-flash attention; CUDA's fused native_dropout) and its
    mask/padding preparation happen, below autograd; the ATen ops it ran are then replayed on
    the meta tensors above autograd. The joint graph gets the fused forward op as one extern
    call, and autograd puts that op's own backward (e.g. aten._efficient_attention_backward,
    native_dropout_backward) into the backward graph; random ops draw as eager's do.
    """

    # NOTE: torchlite's own mode: compiled frames run under it (guards/global_state.cpp).
    _torchlite_transparent_mode = True

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.fake_mode = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CHOSEN_BY_DEVICE:
            out = self.fused(func, args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)

    def fake(self, t: torch.Tensor) -> torch.Tensor:
        f = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=self.device)
        return f.requires_grad_(t.requires_grad) if t.is_floating_point() else f

    def fused(self, func, args: tuple, kwargs: dict):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.utils._python_dispatch import _disable_current_modes

        flat, spec = tree_flatten((args, kwargs))
        metas = [a for a in flat if isinstance(a, torch.Tensor)]
        if any(m.device.type != "meta" for m in metas):
            return None
        if self.fake_mode is None:
            self.fake_mode = FakeTensorMode()
        log = _OpLog()
        with _disable_current_modes(), self.fake_mode:
            fakes = {id(m): self.fake(m) for m in metas}
            f_args, f_kwargs = tree_unflatten(
                [fakes[id(a)] if isinstance(a, torch.Tensor) else a for a in flat], spec
            )
            with log:
                f_out = func(*f_args, **f_kwargs)
        mapped = {id(fakes[id(m)]): m for m in metas}
        keep = []  # NOTE: the logged fakes stay alive while ids map them

        def meta_of(a):
            if isinstance(a, torch.Tensor):
                if id(a) not in mapped:
                    raise _Unsupported(f"{func.__name__}: a tensor its ATen ops made is not traced")
                return mapped[id(a)]
            return a

        for op, o_args, o_kwargs, o_out in log.ops:
            outs = [o for o in tree_flatten(o_out)[0] if isinstance(o, torch.Tensor)]
            if not outs:
                continue  # NOTE: device queries and other non-tensor results
            if op in _NOT_REPLAYED:
                mapped[id(o_out)] = meta_of(o_args[0])
                keep.append(o_out)
                continue
            result = op(*tree_map(meta_of, o_args), **tree_map(meta_of, o_kwargs))
            for o, r in zip(tree_flatten(o_out)[0], tree_flatten(result)[0], strict=True):
                if isinstance(o, torch.Tensor):
                    mapped[id(o)] = r
                    keep.append(o)
        return meta_of(f_out)


@dataclass
class JointTrace:
    """What trace_joint hands to C++: the joint graph and how its inputs and outputs split."""

    reason: str | None = None
    graph: Any = None  # _C.Graph: (primals..., tangents...) -> (outputs..., mutations..., grads...)
    num_primals: int = 0
    num_forward_outputs: int = 0  # graph outputs, then new values of mutated inputs
    num_outputs: int = 0  # of the captured graph
    mutated_inputs: list[int] = field(default_factory=list)
    quiet_mutations: list[int] = field(default_factory=list)  # eager keeps their _version
    differentiable_outputs: list[int] = field(default_factory=list)
    grad_inputs: list[int] = field(default_factory=list)  # primal index of each gradient
    tangent_shapes: list[tuple] = field(default_factory=list)
    captured: Any = None  # the captured _C.Graph (run eagerly under saved-tensor hooks)
    final_grad_mode: bool = True  # grad mode the graph leaves behind (it may end in no_grad)
    # (position among the captured graph's outputs, primal index) of each input it returns
    # itself; num_outputs and differentiable_outputs count the other outputs only.
    passthrough: list[tuple[int, int]] = field(default_factory=list)


def _eager_output_strides(graph) -> list:
    """The strides capture saw eager give each output of `graph` (None where unknown)."""
    nodes = {n["name"]: n for n in graph.nodes()}
    (out,) = [n for n in nodes.values() if n["op"] == "output"]
    strides = []
    for a in out["args"]:
        meta = nodes[a.name]["meta"] if isinstance(a, _C.NodeRef) and a.name in nodes else None
        strides.append(tuple(meta["stride"]) if meta else None)
    return strides


def _dense_format(t: torch.Tensor, stride: tuple):
    """The memory format whose dense strides for t's shape are `stride`, or None."""
    for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
        if (fmt is torch.channels_last and t.dim() != 4) or (
            fmt is torch.channels_last_3d and t.dim() != 5
        ):
            continue
        dense = torch.empty(t.shape, device="meta").contiguous(memory_format=fmt)
        if tuple(dense.stride()) == stride:
            return fmt
    return None


def _with_eager_layouts(outs: list, strides: list) -> list:
    """Outputs whose traced strides differ from eager's (a meta kernel choosing another memory
    format, as group_norm's does for channels-last input) are copied into eager's layout, so
    the compiled forward returns what eager returns (called under the recorder: the copy is a
    node of the joint graph, its gradient passes through)."""
    fixed = []
    for o, want in zip(outs, strides, strict=True):
        if want is not None and o.numel() > 1 and tuple(o.stride()) != want:
            fmt = _dense_format(o, want)
            if fmt is not None:
                o = o.contiguous(memory_format=fmt)
        fixed.append(o)
    return fixed


def _input_examples(graph) -> list[dict]:
    nodes = [n for n in graph.nodes() if n["op"] == "placeholder"]
    for n in nodes:
        if n["meta"] is None:
            raise _Unsupported(f"input {n['name']} is not a tensor")
    return nodes


def _device_of(inputs: list[dict]) -> torch.device:
    devices = {str(n["meta"]["device"]) for n in inputs}
    if len(devices) != 1:
        raise _Unsupported(f"inputs on several devices: {sorted(devices)}")
    return inputs[0]["meta"]["device"]


def _meta_input(n: dict) -> torch.Tensor:
    m = n["meta"]
    t = torch.empty_strided(m["shape"], m["stride"], dtype=m["dtype"], device="meta")
    return t.requires_grad_(m["requires_grad"])


# Tensor methods that change autograd's state rather than compute: the joint graph has no op
# for them, so graphs calling them run op by op.
_AUTOGRAD_STATE_METHODS = {
    "retain_grad",
    "register_hook",
    "requires_grad_",
    "register_post_accumulate_grad_hook",
}


def _identity(v: Any) -> Any:
    return v


def _detached(v: Any, roots: dict) -> Any:
    """v without autograd; a view stays a view of its root's detached value (detach() alone
    drops `_base`), so graph_from_fx's examples share memory as the trace's values did."""
    if not isinstance(v, torch.Tensor):
        return v
    base = v._base
    if base is None:
        if id(v) not in roots:
            roots[id(v)] = (v, v.detach())
        return roots[id(v)][1]
    if id(base) not in roots:
        roots[id(base)] = (base, base.detach())
    return roots[id(base)][1].as_strided(v.shape, v.stride(), v.storage_offset())


def _trace(graph) -> JointTrace:
    inputs = _input_examples(graph)
    device = _device_of(inputs)
    gm = graph_to_module(graph)
    primals = [_meta_input(n) for n in inputs]
    rec = _Recorder(device, _decompositions(device))
    for i, p in enumerate(primals):
        rec.input(p, f"primal_{i}")
        rec.inputs[id(p)] = i
    for n in graph.nodes():
        if n["op"] == "call_method" and n["target"] in _AUTOGRAD_STATE_METHODS:
            raise _Unsupported(f"the graph calls Tensor.{n['target']} (autograd state)")
        # NOTE: capture adds none where autograd records (csrc/capture/data_dependent_assert.cpp);
        # the recorder would drop it (no torch op), so such a graph runs op by op.
        if n["op"] == "call_function" and n["target"] is _asserts.check_assertion:
            raise _Unsupported("the graph checks an assert on a tensor's value")
    flags = [p.requires_grad for p in primals]
    grad_mode = torch.is_grad_enabled()
    try:
        # NOTE: the user's saved-tensor hooks must not see the trace's meta tensors.
        with (
            torch.autograd.graph.saved_tensors_hooks(_identity, _identity),
            rec,
            _DeviceChoices(device),
        ):
            outs = gm.forward(*primals)  # NOTE: no module hooks (global ones too)
            final_grad_mode = torch.is_grad_enabled()
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            if all(isinstance(o, torch.Tensor) for o in outs):
                torch._C._set_grad_enabled(True)  # NOTE: the outputs were computed with grad on
                outs = _with_eager_layouts(outs, _eager_output_strides(graph))
    finally:
        torch._C._set_grad_enabled(grad_mode)  # NOTE: the graph may switch it (a no_grad block)
    if [p.requires_grad for p in primals] != flags:
        raise _Unsupported("the graph changes an input's requires_grad")
    for o in outs:
        if not isinstance(o, torch.Tensor):
            raise _Unsupported(f"the graph returns a {type(o).__name__}")
    # NOTE: an input returned as is (a graph after a break hands the caller's logits back
    # beside the loss) is no output of the joint graph: the call returns the input object
    # itself, as eager does, around the compiled forward.
    passthrough = [(i, rec.inputs[id(o)]) for i, o in enumerate(outs) if id(o) in rec.inputs]
    if passthrough:
        returned = {i for i, _ in passthrough}
        outs = [o for i, o in enumerate(outs) if i not in returned]
    for o in outs:
        if any(i in rec.inputs for i in rec.alias_groups.get(id(o), ())):
            raise _Unsupported("the graph returns a view of an input (autograd's view tracking)")
    mutated = sorted(rec.mutated)
    for i in mutated:
        if primals[i].requires_grad:
            raise _Unsupported("an input that requires grad is mutated")
    differentiable = [i for i, o in enumerate(outs) if o.requires_grad]
    wants_grad = [i for i, p in enumerate(primals) if p.requires_grad]
    if not differentiable or not wants_grad:
        raise _Unsupported("no output depends on an input that requires grad")
    tangents = []
    for i in differentiable:
        t = torch.empty(outs[i].shape, dtype=outs[i].dtype, device="meta")
        rec.input(t, f"tangent_{i}")
        tangents.append(t)
    with torch.autograd.graph.saved_tensors_hooks(_identity, _identity), rec:
        grads = torch.autograd.grad(
            [outs[i] for i in differentiable],
            [primals[i] for i in wants_grad],
            tangents,
            allow_unused=True,
        )
    grad_inputs = [i for i, g in zip(wants_grad, grads, strict=True) if g is not None]
    results = outs + [primals[i] for i in mutated] + [g for g in grads if g is not None]
    rec.graph.output(tuple(rec.value(r) for r in results))
    roots: dict = {}  # id(root) -> (root, its detached value)
    for node in rec.graph.nodes:  # NOTE: the compiled halves run under no autograd
        if "val" in node.meta:
            node.meta["val"] = tree_map(lambda v: _detached(v, roots), node.meta["val"])
    joint, _ = _C.graph_from_fx(SimpleNamespace(graph=rec.graph), device=device)
    return JointTrace(
        graph=joint,
        captured=graph,
        final_grad_mode=final_grad_mode,
        num_primals=len(primals),
        num_forward_outputs=len(outs) + len(mutated),
        num_outputs=len(outs),
        mutated_inputs=mutated,
        quiet_mutations=sorted(rec.quiet),
        differentiable_outputs=differentiable,
        grad_inputs=grad_inputs,
        tangent_shapes=[tuple(t.shape) for t in tangents],
        passthrough=passthrough,
    )


def _trace_without_autocast(graph) -> JointTrace:
    # NOTE: the captured graph holds every cast autocast made as an explicit node (see
    # csrc/capture/autocast.cpp); tracing it under the user's autocast region (the compile
    # happens inside it) must not cast again, in forward or in backward.
    with torch._C._DisableAutocast():
        return _trace(graph)


def trace_joint(graph) -> JointTrace:
    """The joint graph of `graph` (a captured _C.Graph autograd records), or a JointTrace whose
    `reason` says why there is none (the graph then runs op by op through torch's autograd).
    An op whose derivative torch does not implement, or that eager would reject, lands here too:
    at run time eager raises the same error."""
    try:
        return _trace_without_autocast(graph)
    except _Unsupported as e:
        return JointTrace(reason=str(e))
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return JointTrace(reason=f"tracing the joint graph failed: {first}")


_DOUBLE_BACKWARD = (
    b"torchlite: a second derivative through a compiled graph is not supported (its backward is "
    b"compiled for first derivatives only). Compile with options={'compiled_backward': False} "
    b"or set TORCHLITE_COMPILED_BACKWARD=0 to differentiate twice."
)


def aot_autograd_saved(run) -> list[tuple[str, torch.dtype, tuple, int, bool]]:
    """What AOTAutograd's min-cut partitioner (with inductor's decompositions) saves for backward
    while `run(backend)` compiles and runs a forward and backward with that torch.compile backend:
    (name, dtype, shape, bytes, is an input or a view of one) per saved tensor. The reference that
    bench/saved_bytes.py and the partition tests compare torchlite's saved values with."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    rows, inputs = [], set()

    def forward_compiler(gm, _):
        for n in gm.graph.nodes:
            schema = getattr(n.target, "_schema", None)
            view = schema is not None and schema.returns and schema.returns[0].alias_info
            if n.op == "placeholder" or (
                view and n.args and getattr(n.args[0], "name", None) in inputs
            ):
                inputs.add(n.name)
        return make_boxed_func(gm.forward)

    def backward_compiler(gm, _):
        for n in gm.graph.nodes:
            val = n.meta.get("val")
            saved = n.op == "placeholder" and not n.name.startswith("tangents")
            if saved and isinstance(val, torch.Tensor):
                size = val.numel() * val.dtype.itemsize
                rows.append((n.name, val.dtype, tuple(val.shape), size, n.name in inputs))
        return make_boxed_func(gm.forward)

    backend = aot_autograd(
        fw_compiler=forward_compiler,
        bw_compiler=backward_compiler,
        partition_fn=min_cut_rematerialization_partition,
        decompositions=select_decomp_table(),
    )
    torch._dynamo.reset()
    try:
        run(backend)
    finally:
        torch._dynamo.reset()
    return rows


@contextlib.contextmanager
def recording_joint_traces():
    """Collects every joint trace made inside the block (benches and tests read what the
    partition saves). NOTE: C++ calls the helper registered at import (core/python_helpers.h),
    not this module's attribute, so the recorder is registered in its place for the block."""
    traces: list[JointTrace] = []

    def record(graph):
        result = trace_joint(graph)
        traces.append(result)
        return result

    _C.register_python_helper("training.trace_joint", record)
    try:
        yield traces
    finally:
        _C.register_python_helper("training.trace_joint", trace_joint)


def _second_derivative_error(grads: tuple) -> tuple:
    """Under create_graph=True: the gradients, each with a grad_fn that raises when
    differentiated, so a double backward fails loudly instead of missing terms."""
    err = torch._C._functions.DelayedError(_DOUBLE_BACKWARD, len(grads))
    out = err(*[g.detach().requires_grad_() for g in grads])
    return out if isinstance(out, tuple) else (out,)


_OVERWRITTEN = (
    "torchlite: backward ran again through a training step whose saved tensors a later CUDA "
    "graph replay has overwritten (a second backward with retain_graph=True after another "
    "forward). Compile with mode='default' (no CUDA graphs) to keep every step's saved tensors."
)


class _PoolSaved:
    """A training step's saved tensors that a CUDA graph replay of the compiled forward
    handed out from the graph pool uncloned (docs/internals/cuda_graphs.md). C++ calls
    on_overwrite() before a replay that could overwrite them (CudaGraphPool::keep_valid)."""

    __slots__ = ("__weakref__", "consumed", "stale", "tensors")

    def __init__(self, tensors: list) -> None:
        self.tensors = tensors
        self.consumed = False  # backward ran once: a later step no longer needs a copy
        self.stale = False

    def on_overwrite(self) -> None:
        if self.consumed:
            self.stale = True  # NOTE: only a second backward (retain_graph) would read them
        else:
            self.tensors = [t.clone() if isinstance(t, torch.Tensor) else t for t in self.tensors]


def _saved_layouts(backward, num_saved: int) -> list[tuple[int, torch.memory_format]]:
    """(index, memory format) of each saved input of the backward whose traced (meta) value is
    dense in the contiguous or a channels-last layout."""
    out = []
    graph = getattr(backward, "graph", None)  # NOTE: tests hand in plain functions
    if graph is None:
        return out
    placeholders = [n for n in graph.nodes() if n["op"] == "placeholder"]
    for k, node in enumerate(placeholders[:num_saved]):
        meta = node["meta"]
        if not meta or not isinstance(meta.get("shape"), tuple) or not meta["shape"]:
            continue
        try:
            probe = torch.empty_strided(meta["shape"], meta["stride"], device="meta")
        except (RuntimeError, TypeError, ValueError):
            continue  # NOTE: no concrete layout was traced (symbolic sizes): nothing to restore
        for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
            if fmt is torch.channels_last and probe.dim() != 4:
                continue
            if fmt is torch.channels_last_3d and probe.dim() != 5:
                continue
            if probe.is_contiguous(memory_format=fmt):
                out.append((k, fmt))
                break
    return out


def make_training_function(
    joint: JointTrace, forward, backward, saved: list[str], zero_tangent_backward=None
):
    """The callable the frame runs instead of the graph: the compiled forward under a
    torch.autograd.Function whose backward runs the compiled backward.

    `zero_tangent_backward` (one flag per tangent -> a compiled backward with the flagged
    tangents constant zeros; None where there is none) serves the backward calls that autograd
    makes without a gradient for some output: a model returning (loss, logits) where only the
    loss is differentiated. NOTE: autograd would otherwise materialize a zero gradient as large
    as the logits (GPT-2 8x512 bf16: 411 MB) for the backward to read; each pattern of missing
    gradients compiles once.

    NOTE: this runs on every call of a training graph, so it does the least Python work it can:
    index lists are computed once here, context managers are replaced by their C calls, and
    work that only some graphs need (mutated inputs, non-differentiable outputs, autocast,
    contiguous tangents) is skipped for the others."""
    num_outputs = joint.num_outputs
    num_saved = len(saved)
    # Under CUDA graphs: the saved values a replay hands out from the pool (not primals).
    pool_saved = list(getattr(forward, "pool_saved", ()))
    pool_set = set(pool_saved)
    other_saved = [k for k in range(num_saved) if k not in pool_set]
    mutated = joint.mutated_inputs
    num_mutated = len(mutated)
    bumped_at = [k for k, i in enumerate(mutated) if i not in set(joint.quiet_mutations)]
    bumped = [mutated[k] for k in bumped_at]
    set_versions = torch._C._autograd._unsafe_set_version_counter
    differentiable = joint.differentiable_outputs
    non_differentiable = [i for i in range(num_outputs) if i not in set(differentiable)]
    all_differentiable = not non_differentiable
    grad_slots = joint.grad_inputs
    num_inputs = joint.num_primals
    # NOTE: a gradient for every input, in order: backward's results are autograd's answer as is.
    grads_in_order = grad_slots == list(range(num_inputs))
    set_grad_enabled = torch._C._set_grad_enabled
    is_grad_enabled = torch._C.is_grad_enabled
    any_autocast = torch._C._is_any_autocast_enabled
    no_autocast = torch._C._DisableAutocast

    # NOTE: the backward was traced on meta tensors, and some derivative formulas pick their
    # layout handling by what they saw there (group norm's makes its input contiguous on the
    # CPU only, so on meta it records nothing for an input meta calls contiguous). The forward
    # run op by op may hand back a layout its meta value did not have (a CPU convolution with a
    # channels-last weight returns channels-last; its meta value is contiguous), and a torch
    # backward kernel given layouts its trace did not expect computes wrong values silently
    # (CPU native_group_norm_backward with a contiguous gradient and a channels-last input).
    # So each saved value is brought back to its traced layout where the two differ.
    # NOTE: per-call work, so the compiled backward checks and copies in C++ (CompiledHalf);
    # a plain function (tests) gets the same done here.
    relayout = _saved_layouts(backward, num_saved)
    compiled_relayout = relayout
    if relayout and hasattr(backward, "set_relayout"):
        backward.set_relayout(relayout)
        relayout = []
    zero_variants: dict[tuple, Any] = {}  # flags of the missing tangents -> compiled backward

    def backward_without(missing: tuple):
        half = zero_variants.get(missing)
        if half is None:
            half = zero_tangent_backward(list(missing))
            if compiled_relayout:
                half.set_relayout(compiled_relayout)
            zero_variants[missing] = half
        return half

    class CompiledTraining(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            if zero_tangent_backward is not None:
                ctx.set_materialize_grads(False)
            if num_mutated:
                targets = [inputs[i] for i in mutated]
                versions = [t._version for t in targets]
            try:
                results = forward(*inputs)
            except BaseException:
                # NOTE: the compiled forward writes its mutated inputs (batch norm's running
                # stats) in place, last or from the kernel that computes them. Raising before
                # the first such write, it left nothing but random draws behind, which the frame
                # undoes to run eagerly (runtime::Executable::failed_before_lasting_effects).
                # After one, the error propagates with the statistics written so far updated,
                # as eager's batch norms before a failing op leave theirs.
                # Without mutated inputs nothing lasting is written (the frame reruns eagerly, as
                # before in-place writes: a lookup's bounds error after a dropout).
                run.failed_in_compiled_forward = not num_mutated or getattr(
                    forward, "failed_before_lasting_effects", True
                )
                raise
            if num_mutated:
                # NOTE: the forward's stores leave the version counters alone (a copy_ node it
                # runs through torch bumps them): they are set to what eager's would be. The
                # saved values are saved first at the versions before the forward, so that a
                # saved input the graph then mutates (`y = x * buf; buf.add_(1)`) fails in
                # backward as eager's does, rather than reading the new values.
                set_versions(targets, versions)
            if num_saved:
                saved_values = results[len(results) - num_saved :]
                if pool_saved and forward.replayed:
                    holder = _PoolSaved([saved_values[k] for k in pool_saved])
                    forward.keep_valid(holder)
                    ctx.pool_saved = holder
                    ctx.save_for_backward(*[saved_values[k] for k in other_saved])
                else:
                    ctx.pool_saved = None
                    ctx.save_for_backward(*saved_values)
            else:
                ctx.pool_saved = None
            if bumped:
                # NOTE: batch norm's kernels update running stats without bumping the version
                # counter (two training forwards, then the first one's backward, works): only
                # the other mutations count, once each.
                set_versions([inputs[i] for i in bumped], [versions[k] + 1 for k in bumped_at])
            if all_differentiable:
                return results[:num_outputs] if len(results) != num_outputs else results
            # NOTE: a fresh alias each: the same tensor may also be a differentiable output.
            outs = list(results[:num_outputs])
            for i in non_differentiable:
                outs[i] = outs[i].detach()
            ctx.mark_non_differentiable(*[outs[i] for i in non_differentiable])
            return tuple(outs)

        @staticmethod
        def backward(ctx, *grad_outputs):
            tangents = [grad_outputs[i] for i in differentiable]
            run_backward = backward
            missing = None
            for i, t in enumerate(tangents):
                if t is None:
                    missing = missing or [False] * len(tangents)
                    missing[i] = True
                elif not t.is_contiguous():
                    tangents[i] = t.contiguous()
            if missing is not None:
                run_backward = backward_without(tuple(missing))
                tangents = [t for t in tangents if t is not None]
            saved_values = ctx.saved_tensors
            holder = ctx.pool_saved
            if holder is not None:
                if holder.stale:
                    raise RuntimeError(_OVERWRITTEN)
                merged: list[Any] = [None] * num_saved
                for k, v in zip(pool_saved, holder.tensors, strict=True):
                    merged[k] = v
                for k, v in zip(other_saved, saved_values, strict=True):
                    merged[k] = v
                saved_values = merged
            if relayout:
                saved_values = list(saved_values)
                for k, fmt in relayout:
                    v = saved_values[k]
                    if not v.is_contiguous(memory_format=fmt):
                        saved_values[k] = v.contiguous(memory_format=fmt)
            # NOTE: the saved values are handed over to the compiled backward, which frees each
            # after its last reader, as eager's autograd frees them node by node (held to the
            # end, all of them live beside every gradient: GPT-2 8x512's peak). ctx lets go of
            # its references unless the graph is retained (retain_graph=True).
            args = [*saved_values, *tangents]
            del saved_values, tangents
            ctx.maybe_clear_saved_tensors()
            consume = getattr(run_backward, "consume", None)
            # NOTE: autograd runs backward with grad mode on only under create_graph=True.
            create_graph = is_grad_enabled()
            if create_graph:
                set_grad_enabled(False)
            try:
                if any_autocast():
                    with no_autocast():
                        grads = consume(args) if consume else run_backward(*args)
                else:
                    grads = consume(args) if consume else run_backward(*args)
            finally:
                if create_graph:
                    set_grad_enabled(True)
            if holder is not None:
                holder.consumed = True
            if create_graph:
                grads = _second_derivative_error(grads)
            if grads_in_order:
                return grads
            result: list[Any] = [None] * num_inputs
            for slot, g in zip(grad_slots, grads, strict=True):
                result[slot] = g
            return tuple(result)

    # NOTE: torch.autograd.Function.apply (Python) unwraps dead functorch wrappers input by
    # input before the C apply: 160 us for a graph of 200 parameters. Dead wrappers never reach
    # a compiled graph (tests/python/training/test_training_semantics.py), so outside functorch
    # transforms the C apply is called directly.
    c_apply = super(torch.autograd.Function, CompiledTraining).apply
    transforms_active = torch._C._are_functorch_transforms_active
    saved_tensor_hooks = torch._C._autograd._top_saved_tensors_default_hooks
    final_grad_mode = joint.final_grad_mode
    eager = []

    passthrough = joint.passthrough

    def run(*inputs):
        if saved_tensor_hooks(False) is not None:
            # NOTE: saved-tensor hooks (offloading, checkpointing) must see what eager saves.
            if not eager:
                eager.append(graph_to_module(joint.captured).forward)
            return eager[0](*inputs)
        apply = CompiledTraining.apply if transforms_active() else c_apply
        # NOTE: the differentiable outputs were computed with grad on, even where the graph is
        # entered under no_grad and switches it on; the graph may also leave it switched off.
        set_grad_enabled(True)
        try:
            if any_autocast():
                # NOTE: the joint graph holds every cast autocast made at capture as an explicit
                # node; its extern ops (a decomposition's float32 bmm) must not be cast again.
                with no_autocast():
                    results = apply(*inputs)
            else:
                results = apply(*inputs)
        finally:
            set_grad_enabled(final_grad_mode)
        if not passthrough:
            return results
        outs = list(results)
        for position, primal in passthrough:
            outs.insert(position, inputs[primal])
        return tuple(outs)

    run.failed_in_compiled_forward = False
    run.forward_half = forward
    run.backward_half = backward
    run.zero_tangent_backwards = zero_variants
    run.saved = saved
    return run
