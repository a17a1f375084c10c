#include "capture/break_kinds.h"

namespace tl::capture {

const std::vector<BreakKind>& break_kinds() {
  // NOTE: the text is docs/graph_breaks.md's hint column, Markdown included.
  static const std::vector<BreakKind> kinds = {
      {"unsupported_builtin",
       "Move the call out of the compiled function, or guard it with a flag that is false when "
       "compiled; wrap logging helpers in `torchlite.disable`."},
      {"data_dependent_op",
       "Keep the value as a tensor (`torch.where`, masking, `clamp`), or compute it once outside "
       "and pass it in."},
      {"data_dependent_branch",
       "Use `torch.where` / arithmetic masks for both branches, or branch on shapes, dtypes or "
       "Python flags (those are guarded, not broken)."},
      {"unsupported_callable",
       "Call it outside the compiled region, wrap it in `torchlite.disable`, or register it as a "
       "custom torch op with a meta (fake) implementation."},
      {"unsupported_bytecode",
       "Move the construct to a helper outside the hot path, or restructure (e.g. validate inputs "
       "before the compiled call instead of catching errors in it)."},
      {"logging_call",
       "Lower the logger's level for production runs, or log outside the compiled function."},
      {"warning_call",
       "Silence the warning with a filter (`warnings.filterwarnings(\"ignore\", ...)`) for "
       "production runs, or fix what it warns about."},
      {"autocast_exit",
       "Remove the break inside the `with torch.autocast(...)` block (see its own kind), or move "
       "the breaking code out of the block."},
      {"op_error", "Fix the error reported by eager PyTorch; it is not a torchlite limitation."},
      {"user_exception",
       "Nothing to do if it is an expected error path; otherwise check inputs before calling the "
       "compiled function."},
      {"raise_of_non_exception",
       "Raise an exception class or instance (`raise ValueError(...)`): eager Python raises "
       "TypeError for anything else."},
      {"unsupported_side_effect",
       "Return new values instead of mutating shared state, or move the mutation outside the "
       "compiled function."},
      {"module_built_in_forward", "Create the module once in `__init__` and call it in `forward`."},
      {"optimizer_step", "Nothing to do: this is how a compiled training step runs its optimizer."},
      {"autograd_function",
       "Run inference under `torch.no_grad()`/`torch.inference_mode()`, or write the op with "
       "torch functions so autograd derives its backward."},
      {"numpy_call", "Use the torch function of the same name on tensors."},
      {"effect_order",
       "Do the in-place update or the Python-side update after the op, or check the indices "
       "before the compiled call."},
      {"unsupported_operand",
       "Convert the operand first (to a tensor, a Python number, or a tuple, list or dict of "
       "them), or use the torch function on tensors (`torch.minimum`, `torch.prod`, "
       "`torch.sort`...)."},
      {"non_constant_index",
       "Index Python containers with ints, slices of ints or sizes; to select by a value computed "
       "from a tensor, index a tensor instead (`t[idx]`, `torch.index_select`, `torch.gather`)."},
      {"non_constant_argument",
       "Pass a Python constant there (a flag, a dtype, a device string, an exception class), or "
       "decide the value before the compiled call and pass it in."},
      {"unsupported_dict_key",
       "Key dicts by str, int or other immutable constants (or by objects compared by "
       "identity); keep tensors and traced values as the dict's values, not its keys."},
      {"custom_dunder",
       "Write the method in Python returning plain values (`__len__` an int, `__eq__` a bool, "
       "`__iter__` an iterator over a list or tuple, `keys()` of a dict), or do the `len`, "
       "comparison, truth test or unpacking outside the compiled function."},
      {"set_of_objects",
       "Keep sets of constants (str, int, tuples of them); hold modules, tensors and other objects "
       "in a list, or in a dict keyed by name."},
      {"unsupported_iteration",
       "Iterate a list, tuple, dict, range, string or module container; convert other iterables "
       "with `list(...)` before the compiled call."},
      {"unsupported_attribute",
       "Read the attribute outside the compiled function and pass the value in, or make it a "
       "plain attribute or a Python `@property`."},
      {"format_traced_value",
       "Format sizes, dtypes and Python constants only; print tensor values and other objects "
       "outside the compiled function (or in a helper wrapped in `torchlite.disable`)."},
      {"tensor_subclass",
       "Pass plain tensors (`t.as_subclass(torch.Tensor)`) into compiled code, or run the code "
       "that uses the subclass under `torchlite.disable`."},
      {"untracked_tensor",
       "Pass the tensor as an argument, or keep it as a module parameter or buffer "
       "(`register_buffer`) or a module-level global."},
      {"active_torch_mode",
       "Leave the mode before calling compiled code; a mode that need not see every op can set "
       "`_torchlite_transparent_mode = True` on its class."},
      {"live_value_at_break",
       "The graph breaks at this line for another cause (`TORCHLITE_LOGS=graph_breaks`): remove "
       "that cause, or do not keep this value or block alive across it."},
      {"unsupported_return",
       "Return tensors, Python numbers, strings, and tuples, lists or dicts of them; make other "
       "objects outside the compiled function."},
      {"value_out_of_range",
       "Keep indices and counts within the container's size; check them before the compiled call."},
      {"unsupported_super",
       "Call `super().method(...)` with no arguments inside a method, on an `nn.Module` or a plain "
       "Python instance."},
      {"module_hooks",
       "Register hooks with `register_forward_hook`/`register_forward_pre_hook` (leave the hook "
       "dicts as torch.nn makes them); return None, new args, or `(args, kwargs)` with a dict from "
       "a pre-hook."},
      {"model_output_construction",
       "Build the output with its declared fields as keyword arguments (`Output(logits=x, "
       "hidden_states=h)`)."},
      {"unsupported_partial",
       "Pass the partial's keywords as plain keyword arguments (`functools.partial(f, dim=-1)`), "
       "or build it outside the compiled function."},
      {"autocast_arguments",
       "Enter autocast with a device type and a dtype: `torch.autocast(\"cuda\", "
       "dtype=torch.bfloat16)`."},
      {"unsupported_function_object",
       "Define the function outside the compiled function (at module level or in `__init__`), or "
       "give it plain defaults."},
  };
  return kinds;
}

std::string kind_hint(const std::string& kind) {
  for (const auto& k : break_kinds())
    if (kind == k.name) return k.hint;
  return "";
}

}  // namespace tl::capture
