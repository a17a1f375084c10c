#include "codegen/cpu/emission_key.h"

#include <atomic>
#include <cstring>

#include "codegen/common/runtime_constants.h"
#include "core/errors.h"

namespace tl::codegen::cpu {

namespace {
// A number of the loop space (sites of kinds 0 to 3).
int64_t space_value(const LoopSpace& s, int64_t site) {
  int64_t kind = site >> 20, rest = site & ((int64_t{1} << 20) - 1);
  auto at = [](const std::vector<int64_t>& v, int64_t i) {
    TL_CHECK(i >= 0 && static_cast<size_t>(i) < v.size()) << "dims site out of the loop space";
    return v[static_cast<size_t>(i)];
  };
  switch (kind) {
    case 0:
      return at(s.outer, rest);
    case 1:
      return at(s.red, rest);
    case 2:
      TL_CHECK(static_cast<size_t>(rest / 64) < s.strides.size()) << "dims site of no buffer";
      return at(s.strides[static_cast<size_t>(rest / 64)], rest % 64);
    case 3:
      return at(s.offsets, rest);
  }
  TL_CHECK(false) << "unknown dims site " << site;
  return 0;
}
}  // namespace

namespace {
std::atomic<bool> g_plain_division{false};
}  // namespace

void set_plain_runtime_division(bool on) { g_plain_division = on; }
bool plain_runtime_division() { return g_plain_division; }

int64_t site_value(const ir::Kernel& k, const LoopSpace& s, int64_t site) {
  const int64_t kind = site >> 20;
  if (kind < 4) return space_value(s, site);
  const size_t i = static_cast<size_t>(site & ((int64_t{1} << 20) - 1));
  TL_CHECK(i < k.exprs.size()) << "dims site of no expr";
  if (kind == 4) return k.exprs[i].ivalue;
  const Magic64 m = magic_u64(k.exprs[i].ivalue);
  if (kind == 5) return static_cast<int64_t>(m.multiplier);
  TL_CHECK(kind == 6) << "unknown dims site " << site;
  return m.shift;
}

bool literal_site(const LoopSpace& s, int64_t site) {
  int64_t kind = site >> 20, rest = site & ((int64_t{1} << 20) - 1);
  const size_t n_outer = s.outer.size(), n = n_outer + s.red.size();
  auto fixed = [&](size_t axis) { return axis < s.fixed.size() && s.fixed[axis]; };
  if (kind == 0) return fixed(static_cast<size_t>(rest));
  if (kind == 1) return fixed(n_outer + static_cast<size_t>(rest));
  if (kind != 2) return false;
  const size_t axis = static_cast<size_t>(rest % 64);
  if (axis + 1 >= n) return false;
  int64_t inner = 1;
  for (size_t d = axis + 1; d < n; ++d) {
    if (!fixed(d)) return false;
    inner *= d < n_outer ? s.outer[d] : s.red[d - n_outer];
  }
  return inner == space_value(s, site);
}

Literals literal_values(const ir::Kernel& k, const LoopSpace& s) {
  Literals out;
  if (!k.runtime_sizes) return out;
  auto literal = [&](int64_t site) {
    if (literal_site(s, site)) out.emplace_back(site, site_value(k, s, site));
  };
  for (size_t d = 0; d < s.outer.size(); ++d) literal(outer_site(d));
  for (size_t d = 0; d < s.red.size(); ++d) literal(red_site(d));
  for (size_t b = 0; b < s.strides.size(); ++b)
    for (size_t a = 0; a < s.strides[b].size(); ++a) literal(stride_site(b, a));
  return out;
}

bool holds_literals(const ir::Kernel& k, const LoopSpace& s, const Literals& lits) {
  for (const auto& [site, v] : lits)
    if (site_value(k, s, site) != v) return false;
  return true;
}

namespace {
class KeyWriter {
 public:
  explicit KeyWriter(bool runtime_sizes) : runtime_(runtime_sizes) {}
  // A size, stride or offset: with runtime sizes only 0, 1 or its sign.
  void num(int64_t v) {
    if (runtime_ && v != 0 && v != 1)
      out_ += v > 0 ? 'N' : 'M';
    else
      raw(v);
  }
  void nums(const std::vector<int64_t>& v) {
    raw(static_cast<int64_t>(v.size()));
    for (int64_t x : v) num(x);
  }
  void raw(int64_t v) {
    out_ += std::to_string(v);
    out_ += ',';
  }
  void tag(char c) { out_ += c; }
  std::string take() { return std::move(out_); }

 private:
  bool runtime_;
  std::string out_;
};
}  // namespace

std::string emission_key(const ir::Kernel& k, const LoopSpace& s) {
  KeyWriter w(k.runtime_sizes);
  w.tag(k.runtime_sizes ? 'R' : 'S');
  if (k.runtime_sizes && plain_runtime_division()) w.tag('P');
  w.raw(k.aliased_io);
  w.raw(k.grouped);
  w.raw(k.reduction_axes);
  w.tag('s');
  w.nums(k.shape);
  auto view = [&](const ir::BufferView& v) {
    w.raw(static_cast<int64_t>(v.type));
    w.nums(v.strides);
    w.num(v.offset);
  };
  w.tag('i');
  w.raw(static_cast<int64_t>(k.inputs.size()));
  for (const auto& v : k.inputs) view(v);
  w.tag('o');
  w.raw(static_cast<int64_t>(k.outputs.size()));
  for (const auto& o : k.outputs) w.raw(o.expr), view(o.view);
  w.tag('e');
  w.raw(static_cast<int64_t>(k.exprs.size()));
  const std::vector<char> runtime = runtime_constants(k);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const ir::Expr& e = k.exprs[i];
    w.raw(static_cast<int64_t>(e.op));
    w.raw(static_cast<int64_t>(e.type));
    w.raw(e.buffer);
    if (i < runtime.size() && runtime[i])
      w.tag('N');
    else
      w.raw(e.ivalue);
    int64_t bits = 0;  // NOTE: the bits, so -0.0 and NaN payloads stay distinct
    static_assert(sizeof(bits) == sizeof(e.value));
    std::memcpy(&bits, &e.value, sizeof(bits));
    w.raw(bits);
    w.raw(static_cast<int64_t>(e.operands.size()));
    for (int o : e.operands) w.raw(o);
  }
  w.tag('L');
  w.nums(s.outer);
  w.nums(s.red);
  w.raw(static_cast<int64_t>(s.strides.size()));
  for (const auto& st : s.strides) w.nums(st);
  w.nums(s.offsets);
  for (const auto& [axis, buffer] : s.index_buffer)
    w.raw(axis), w.raw(static_cast<int64_t>(buffer));
  return w.take();
}

}  // namespace tl::codegen::cpu
