#pragma once
// GLOBAL_STATE: torch's thread-global modes that change what a traced graph
// computes. Grad mode comes first: it flips most often (eval loops under
// torch.no_grad()) and changes whether autograd must be recorded.
#include <string>

#include "core/py_ref.h"

namespace tl::guards {

// Whether a torch function mode or a torch dispatch mode is active now (a
// TorchFunctionMode or TorchDispatchMode context): it sees every op the frame
// runs, which a captured graph would bypass. Throws PythonError on failure.
bool torch_modes_active();

class GlobalState {
 public:
  GlobalState();  // records the state now; imports torch; throws PythonError on failure

  bool check() const;            // throws PythonError if a torch query raised
  std::string mismatch() const;  // after check() failed: "grad mode changed (was True)"
  std::string str() const;       // "GLOBAL_STATE grad_mode=True inference_mode=False ..."

 private:
  bool grad_ = false;
  bool inference_ = false;
  bool modes_ = false;  // torch_modes_active(): such a frame runs eagerly
  PyRef default_dtype_;
  bool any_autocast_ = false;
  bool autocast_cpu_ = false;
  bool autocast_cuda_ = false;
  // The region's dtype per enabled device (a graph's casts bake it in).
  PyRef autocast_cpu_dtype_, autocast_cuda_dtype_;
};

}  // namespace tl::guards
