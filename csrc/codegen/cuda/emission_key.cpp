#include "codegen/cuda/emission_key.h"

#include <cstring>

#include "core/errors.h"

namespace tl::codegen::cuda {

namespace {
void put(std::string& out, int64_t v) {
  out += std::to_string(v);
  out += ',';
}

void put_all(std::string& out, const std::vector<int64_t>& v) {
  put(out, static_cast<int64_t>(v.size()));
  for (int64_t x : v) put(out, x);
}

void put_view(std::string& out, const ir::BufferView& v) {
  put(out, static_cast<int64_t>(v.type));
  put_all(out, v.strides);
  put(out, v.offset);
}
}  // namespace

std::string emission_key(const ir::Kernel& k, const Target& t) {
  std::string out;
  out.reserve(64 + 24 * k.exprs.size() +
              16 * (k.inputs.size() + k.outputs.size()) * k.shape.size());
  out += 'T';
  for (int64_t v : {int64_t{t.sm_major}, int64_t{t.sm_minor}, int64_t{t.multiprocessors},
                    int64_t{t.pointwise_block}, int64_t{t.reduce_block}})
    put(out, v);
  out += 'K';
  put(out, k.runtime_sizes);
  put(out, k.aliased_io);
  put(out, k.grouped);
  put(out, k.reduction_axes);
  put_all(out, k.shape);
  put(out, static_cast<int64_t>(k.static_axes.size()));
  for (char c : k.static_axes) put(out, c);
  put(out, static_cast<int64_t>(k.static_constants.size()));
  for (char c : k.static_constants) put(out, c);
  out += 'i';
  put(out, static_cast<int64_t>(k.inputs.size()));
  for (const auto& v : k.inputs) put_view(out, v);
  out += 'o';
  put(out, static_cast<int64_t>(k.outputs.size()));
  for (const auto& o : k.outputs) put(out, o.expr), put_view(out, o.view);
  out += 'e';
  put(out, static_cast<int64_t>(k.exprs.size()));
  for (const ir::Expr& e : k.exprs) {
    put(out, static_cast<int64_t>(e.op));
    put(out, static_cast<int64_t>(e.type));
    put(out, e.buffer);
    put(out, e.ivalue);
    int64_t bits = 0;  // NOTE: the bits, so -0.0 and NaN payloads stay distinct
    static_assert(sizeof(bits) == sizeof(e.value));
    std::memcpy(&bits, &e.value, sizeof(bits));
    put(out, bits);
    put(out, static_cast<int64_t>(e.operands.size()));
    for (int o : e.operands) put(out, o);
  }
  return out;
}

CudaKernel renamed_launch(const CudaKernel& spec, const std::string& from, const std::string& to) {
  auto rename = [&](const std::string& entry) {
    if (entry.empty()) return entry;
    TL_CHECK(entry.compare(0, from.size(), from) == 0)
        << "entry " << entry << " is not named after its kernel " << from;
    return to + entry.substr(from.size());
  };
  // NOTE: the whole launch copied, so a field added to CudaKernel travels with it.
  CudaKernel out = spec;
  out.source.clear();
  out.name = rename(spec.name);
  out.vector_name = rename(spec.vector_name);
  out.vector_fallback_name = rename(spec.vector_fallback_name);
  out.group.name = rename(spec.group.name);
  return out;
}

}  // namespace tl::codegen::cuda
