"""Plain-Python stand-ins that capture inlines in place of functions it cannot trace (torch
functions, C builtins that call user code).

Each function here has the signature and the result of the function it replaces
(csrc/capture/polyfills.cpp maps one to the other); its body uses only what capture traces (tensor
ops, loops over sizes known at trace time, calls of the user's own functions). Eagerly run code
never calls these: torch's own function runs there.
"""

import torch


def _leaves(xs):
    """(leaves, rebuild) of a scan input: a tensor, or a tuple/list of tensors."""
    if isinstance(xs, (tuple, list)):
        kind = type(xs)
        return list(xs), lambda items: kind(items)
    return [xs], lambda items: items[0]


def _check_scan_args(combine_fn, leaves, dim, reverse, combine_mode):
    """The argument errors torch's associative_scan raises, with its messages and types (torch's
    own choice of ValueError/RuntimeError, kept for parity)."""
    if not callable(combine_fn):
        raise ValueError(f"Combine_fn must be a callable, but got {combine_fn}")  # noqa: TRY004
    if not isinstance(dim, int):
        raise ValueError("Dim must be an int, but got " + str(type(dim)))  # noqa: TRY004
    if not isinstance(reverse, bool):
        raise RuntimeError("Reverse must be a bool, but got " + str(type(reverse)))  # noqa: TRY004
    if combine_mode not in ["pointwise", "generic"]:
        raise ValueError(
            f"Combine_mode must either 'pointwise' or 'generic', but got {combine_mode}"
        )
    if combine_mode == "pointwise" and not all(x.device.type in ("cuda", "xpu") for x in leaves):
        raise ValueError(
            "For combine_mode='pointwise', all input tensors need to be on CUDA or XPU"
        )
    if len(leaves) == 0:
        raise ValueError("Expected at least 1 xs leaf")
    if any(not isinstance(x, torch.Tensor) for x in leaves):
        raise ValueError("xs leaves must be a Tensor")
    if any(x.ndim <= dim or x.shape[dim] == 0 for x in leaves):
        raise ValueError(
            "All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0"
        )


def associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):
    """torch._higher_order_ops.associative_scan.associative_scan as a left-to-right scan.

    NOTE: transformers' Mamba takes this path whenever torch.compiler.is_compiling() is true
    (which it is while torchlite traces). torch's eager version runs combine_fn under torch.vmap
    (generic mode), which capture cannot trace; vmap hands combine_fn one element along `dim`, so
    this calls it on `select(dim, i)` slices, the same values in sequence order. Sums come in
    another association order than torch's tree, as the sequential loop Mamba uses off-compile.
    `combine_mode` only picks torch's kernel; the result is the same.
    """
    leaves, rebuild = _leaves(xs)
    _check_scan_args(combine_fn, leaves, dim, reverse, combine_mode)
    n = leaves[0].shape[dim]
    order = range(n - 1, -1, -1) if reverse else range(n)
    acc = None
    steps = []
    for i in order:
        cur = rebuild([x.select(dim, i) for x in leaves])
        acc = cur if acc is None else combine_fn(acc, cur)
        steps.append(_leaves(acc)[0])
    if reverse:
        steps.reverse()
    return rebuild([torch.stack([s[j] for s in steps], dim) for j in range(len(leaves))])


def reduce(function, iterable, *initial):
    """functools.reduce (a C function calling `function`: its calls are traced here)."""
    if len(initial) > 1:
        raise TypeError(f"reduce expected at most 3 arguments, got {2 + len(initial)}")
    it = iter(iterable)
    if initial:
        value = initial[0]
    else:
        for value in it:  # the first item starts the fold
            break
        else:
            raise TypeError("reduce() of empty iterable with no initial value")
    for element in it:
        value = function(value, element)
    return value


def count_elements(mapping, iterable):
    """collections' _count_elements (C; Counter.update of an iterable): as its pure-Python
    fallback in collections/__init__.py."""
    mapping_get = mapping.get
    for elem in iterable:
        mapping[elem] = mapping_get(elem, 0) + 1


def nlargest(n, iterable, key=None):
    """heapq.nlargest (its heap helpers are C: heapify, _heapreplace_max): as its documented
    equivalent, `sorted(iterable, key=key, reverse=True)[:n]` (the same ties order: both keep
    equal items in iteration order). Counter.most_common(n) calls it."""
    if n <= 0:
        return []
    return sorted(iterable, key=key, reverse=True)[:n]


def nsmallest(n, iterable, key=None):
    """heapq.nsmallest: as its documented equivalent, `sorted(iterable, key=key)[:n]`."""
    if n <= 0:
        return []
    return sorted(iterable, key=key)[:n]
