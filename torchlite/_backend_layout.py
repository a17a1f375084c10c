"""The memory layout eager's kernels give an op's result where torch's meta kernel cannot know it.

Capture takes every result's strides from the meta kernel, but some eager kernels choose their
output layout by the device's backend: a convolution returns channels-last when oneDNN or cuDNN
runs it channels-last (also for a contiguous input with a channels-last weight), the CPU's
group norm keeps a channels-last input's layout, batch norm gives its input's suggested memory
format. The meta kernel answers contiguous (or preserves strides), so user code that reads
`y.stride()` or branches on `y.is_contiguous()` would see other values than in eager, and the
compiled outputs would carry other strides. `eager_layout` corrects the meta result
(capture/context.cpp calls it for the ops named in `_RULES`).

The convolution's answer is torch's own: `torch._C._select_conv_backend` and
`_conv_determine_backend_memory_format` (what FakeTensor asks too), given stand-in tensors that
carry the real device, sizes, strides and dtype but no storage, so the decision is the real
backend's on CPU and CUDA alike.
"""

import torch
from torch._prims_common import suggest_memory_format


class _ShapeOnly(torch.Tensor):
    """Sizes, strides, dtype and device with no storage: for torch's layout queries only."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"torchlite: a shape-only tensor reached {func}")


def _stand_in(t, device):
    return torch.Tensor._make_wrapper_subclass(
        _ShapeOnly, t.shape, strides=t.stride(), dtype=t.dtype, device=device
    )


def _ints(v, n):
    return [int(v)] * n if isinstance(v, int) else [int(i) for i in v]


def _conv_args(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return input, weight, bias, stride, padding, dilation, False, 0, groups


def _conv_transpose_args(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    return input, weight, bias, stride, padding, dilation, True, output_padding, groups


def _convolution_args(
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, *_
):
    return input, weight, bias, stride, padding, dilation, transposed, output_padding, groups


def _conv_format(device, args, kwargs, parse):
    input, weight, bias, stride, padding, dilation, transposed, out_pad, groups = parse(
        *args, **kwargs
    )
    n = weight.dim() - 2
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        else:
            # NOTE: "same" with an odd total pads the input first (a new tensor); even totals
            # become a symmetric padding.
            totals = [d * (k - 1) for d, k in zip(_ints(dilation, n), weight.shape[2:])]
            if any(t % 2 for t in totals):
                return None
            padding = [t // 2 for t in totals]
    if input.dim() != weight.dim():  # unbatched: torch adds the batch dimension first
        return None
    bias = None if bias is None else _stand_in(bias, device)
    x, w = _stand_in(input, device), _stand_in(weight, device)
    spec = (_ints(stride, n), _ints(padding, n), _ints(dilation, n), bool(transposed))
    backend = torch._C._select_conv_backend(x, w, bias, *spec, _ints(out_pad, n), int(groups))
    return torch._C._conv_determine_backend_memory_format(x, w, backend)


def _conv_rule(parse):
    def rule(device, result, args, kwargs):
        # NOTE: 1-d convolutions run as 2-d ones on an unsqueezed input: contiguous, as meta says.
        if result.dim() not in (4, 5):
            return None
        return _conv_format(device, args, kwargs, parse)

    return rule


def _group_norm(device, result, args, kwargs):
    # NOTE: only the CPU kernel keeps the input's layout; CUDA's writes contiguous as meta does.
    return suggest_memory_format(args[0]) if device.type == "cpu" else None


def _batch_norm(device, result, args, kwargs):
    x = args[0] if args else kwargs["input"]
    return suggest_memory_format(x) if x.dim() in (4, 5) else None


# NOTE: ops whose result layout is the device kernel's choice, with no backend query.
_RUN_FOR_LAYOUT = frozenset(
    [
        "pad", "constant_pad_nd", "_pad_circular", "_pad_enum",
        *(f"{kind}_pad{n}d" for kind in ("reflection", "replication") for n in (1, 2, 3)),
        "roll", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle",
        *(f"{kind}_pool{n}d" for kind in ("avg", "max", "adaptive_avg", "adaptive_max")
          for n in (1, 2, 3)),
        "_adaptive_avg_pool2d", "_adaptive_avg_pool3d",
        *(f"max_pool{n}d_with_indices" for n in (1, 2, 3)),
        "fractional_max_pool2d", "fractional_max_pool3d",
        *(f"upsample_{mode}" for mode in (
            "nearest1d", "nearest2d", "nearest3d", "linear1d", "bilinear2d", "bicubic2d",
            "trilinear3d")),
        *(f"_upsample_{mode}" for mode in (
            "nearest_exact1d", "nearest_exact2d", "nearest_exact3d", "bilinear2d_aa",
            "bicubic2d_aa")),
    ]
)  # fmt: skip

# NOTE: a real run allocates its input on the device once per capture; beyond this size the
# graph breaks instead (the op then runs eagerly, with eager's layout).
_RUN_FOR_LAYOUT_MAX_BYTES = 1 << 28


def _real_zeros(t, device):
    """Zeros on `device` with `t`'s sizes, strides and dtype (`t` a meta tensor)."""
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    if extent * t.element_size() > _RUN_FOR_LAYOUT_MAX_BYTES:
        raise RuntimeError(f"an input of {extent} elements is too large to run for its layout")
    return torch.zeros(extent, dtype=t.dtype, device=device).as_strided(t.shape, t.stride())


def _format_of(real):
    """The memory format that lays a tensor out as `real` is, or None when none does."""
    formats = [torch.contiguous_format]
    if real.dim() == 4:
        formats.append(torch.channels_last)
    if real.dim() == 5:
        formats.append(torch.channels_last_3d)
    for fmt in formats:
        if torch.empty(real.shape, device="meta", memory_format=fmt).stride() == real.stride():
            return fmt
    return None


def _run_for_layout(name, target, device, result, args, kwargs):
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if all(t.is_contiguous() for t in tensors):
        return result
    op = getattr(torch.Tensor, name) if target is None else target

    def real(a):
        return _real_zeros(a, device) if isinstance(a, torch.Tensor) else a

    with torch.no_grad():
        out = op(*[real(a) for a in args], **{k: real(v) for k, v in kwargs.items()})
    metas = result if isinstance(result, (tuple, list)) else (result,)
    reals = out if isinstance(out, (tuple, list)) else (out,)
    laid = []
    for meta, r in zip(metas, reals, strict=True):
        if not isinstance(meta, torch.Tensor) or meta.stride() == r.stride():
            laid.append(meta)
            continue
        fmt = _format_of(r)
        if fmt is None:
            raise RuntimeError(f"{name} gives a result with strides {r.stride()}")
        laid.append(meta.clone(memory_format=fmt))
    if not isinstance(result, (tuple, list)):
        return laid[0]
    return type(result)(laid)


_RULES = {
    "conv2d": _conv_rule(_conv_args),
    "conv3d": _conv_rule(_conv_args),
    "conv_transpose2d": _conv_rule(_conv_transpose_args),
    "conv_transpose3d": _conv_rule(_conv_transpose_args),
    "convolution": _conv_rule(_convolution_args),
    "_convolution": _conv_rule(_convolution_args),
    "group_norm": _group_norm,
    "batch_norm": _batch_norm,
}


def eager_layout(name, device, result, args, kwargs, target=None):
    """`result` (a meta tensor) laid out as eager's kernel for op `name` on `device` lays it
    out; `result` itself when the layouts agree or no rule applies. `args`/`kwargs` are the
    call's meta arguments; `target` the function called (None for a Tensor method, whose
    `args` start with the tensor)."""
    if name in _RUN_FOR_LAYOUT and device.type in ("cpu", "cuda"):
        return _run_for_layout(name, target, device, result, args, kwargs or {})
    rule = _RULES.get(name)
    if rule is None or not isinstance(result, torch.Tensor) or device.type not in ("cpu", "cuda"):
        return result
    fmt = rule(device, result, args, kwargs or {})
    if fmt is None:
        return result
    # NOTE: eager allocates with this format, which also fixes the strides of size-1
    # dimensions; clone does the same (and keeps autograd's view of the result).
    laid_out = result.clone(memory_format=fmt)
    return result if laid_out.stride() == result.stride() else laid_out
