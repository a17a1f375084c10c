#pragma once
// The dtype helpers live in ir/ (the runtime reads them too); passes use them unqualified.
#include "ir/dtype.h"

namespace tl::passes {

using ir::compute_type;
using ir::PromoteOperand;
using ir::result_type;
using ir::scalar_type_of;
using ir::torch_dtype_of;

}  // namespace tl::passes
