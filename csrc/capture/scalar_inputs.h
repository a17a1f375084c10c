#pragma once
// Numbers a resume function takes per call, as 0-d tensor inputs of its graph
// (docs/internals/dynamic-shapes.md, "Numbers from .item() across a break").
//
// `s = x.abs().max().item()` breaks the graph; CPython runs `.item()` and calls the resume
// function with `s`, a new float on every call. Guarded by value, the resume function was
// captured again for every value (then ran eagerly at cache_size_limit). Now a float or int
// argument of a resume function (that is not a size: capture.cpp size_argument) starts as a
// scalar value (Value::scalar): its guard is only its type (NUMBER_TYPE), and
//  - as an operand of a tensor op whose result a 0-d tensor gives the same way (`x / s`,
//    `s - x`, `x > s`, `x.masked_fill(m, s)`, `torch.full(size, s)`, `x.add(y, alpha=s)`), it
//    becomes a graph input:
//    torch.scalar_tensor(L['s']) made at each call (float64 or int64, on the op's device), cast
//    to the dtype eager converts the number to;
//  - handed on at another break or returned, it is read again from the frame (a Source
//    residual);
//  - `int(s)`, `float(s)`, float arithmetic with numbers (`1 - s`, `-s`, `s / 2`) and small int
//    arithmetic (`n + 1`) give scalar values computed in the graph (scalar_conversion,
//    scalar_arith);
//  - anything else (a branch, `math.exp(s)`, `1 / s`, a size, an op not listed) specialises it:
//    the guard by value it had before (CaptureContext::specialise).
// Why this is never wrong: while `scalar` is set nothing has read the number as a constant; the
// graph reads the call's number through its source; each rewritten op has eager's result dtype
// (checked on meta tensors) and computes with the number converted as eager converts it.
#include <string>
#include <utility>
#include <vector>

#include "capture/context.h"
#include "capture/value.h"

namespace tl::capture {

// The value of a resume function's float or int argument `n` (borrowed, read from `src`): a
// scalar value guarded by its type, or null when `n` is not one (a bool, an int beyond int64).
ValuePtr scalar_argument(CaptureContext& ctx, PyObject* n, const ir::SourcePtr& src);

// `int(s)` or `float(s)` of a scalar value `arg` (`fn` the builtin called): the scalar value of
// the result (`arg` itself when the type does not change); null for any other call.
ValuePtr scalar_conversion(CaptureContext& ctx, const ValuePtr& fn, const ValuePtr& arg);

// `op(*args)` in Python on plain numbers and at least one scalar value: `+ - * /` and unary `-`
// with a float result (`1 - s`, `s / 2`, `-s`, `n * 0.5`) computed in the graph in float64, as
// CPython computes floats (IEEE double); `+ - *`, unary `-`, and `//` or `%` by a plain nonzero
// int on ints (`n + 1`, `2 * n - 3`, `n // 3`) computed in int64 where the int inputs' narrow
// guard (within +-2**31) keeps every result far within int64 (CPython's ints do not overflow).
// Null for anything else: a division by a scalar value (CPython raises for 0, a tensor gives
// inf), int / int, float `//` and `%`, an int result that could leave int64.
ValuePtr scalar_arith(PyObject* op, const std::vector<ValuePtr>& args);

// The graph's 0-d tensor of a computed scalar value (Value::scalar_fn) on `device` (borrowed):
// its operands' inputs and the conversion or arithmetic on them.
ValuePtr scalar_expression_tensor(CaptureContext& ctx, const ValuePtr& v, PyObject* device);

// A torch op with scalar values among its operands: recorded with 0-d tensors in their place
// where the op gives eager's result with them (the result); otherwise every scalar value inside
// the operands is specialised and null is returned (record_op goes on with them as constants).
ValuePtr scalar_op(CaptureContext& ctx, PyObject* target, const std::string& method,
                   const std::vector<ValuePtr>& args,
                   const std::vector<std::pair<std::string, ValuePtr>>& kwargs);

}  // namespace tl::capture
