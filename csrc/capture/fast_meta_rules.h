#pragma once
// The rules of fast_meta, one family a file: each infers a call's result or
// throws NotHandled (then torch's meta kernel answers).
#include "capture/fast_meta_args.h"

namespace tl::capture::fast_meta {

// fast_meta_elementwise.cpp
Result unary(const OpRule& rule, const Call& c);
Result binary(const OpRule& rule, const Call& c);
Result where(const OpRule& rule, const Call& c, bool method);
Result masked_fill(const OpRule& rule, const Call& c);
Result clamp(const OpRule& rule, const Call& c);
Result tri(const OpRule& rule, const Call& c);
// fast_meta_reduce.cpp
Result reduce(const OpRule& rule, const Call& c);
Result softmax(const OpRule& rule, const Call& c);
// fast_meta_norm.cpp
Result layer_norm(const OpRule& rule, const Call& c);
Result batch_norm(const OpRule& rule, const Call& c);
Result group_norm(const OpRule& rule, const Call& c);
// fast_meta_join.cpp
Result join(const OpRule& rule, const Call& c);
Result gather(const OpRule& rule, const Call& c);
// fast_meta_matmul.cpp
Result linear(const OpRule& rule, const Call& c);
Result addmm(const OpRule& rule, const Call& c);
Result attention(const OpRule& rule, const Call& c);

}  // namespace tl::capture::fast_meta
