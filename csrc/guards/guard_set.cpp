#include "guards/guard_set.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "core/errors.h"
#include "guards/fetch.h"
#include "guards/global_state.h"
#include "guards/leaf_guard.h"

namespace tl::guards {

namespace {
// One source in the guard tree: fetched once per check from its parent's
// value (or the frame, for roots), then its guards, then its children.
struct Node {
  ir::SourcePtr source;
  std::string label;  // source->str(), computed once
  FetchStep step;
  std::vector<LeafGuard> guards;
  std::vector<std::unique_ptr<Node>> children;
  int slot = -1;  // index in Impl::slots for a tensor input, else -1

  explicit Node(ir::SourcePtr s) : source(s), label(s->str()), step(*s) {}
};
using Nodes = std::vector<std::unique_ptr<Node>>;
}  // namespace

struct GuardSet::Impl {
  std::optional<GlobalState> global_state;
  Nodes roots;  // in insertion order; children likewise
  size_t count = 0;
  std::vector<GuardSet::IdMatchedLocal> id_locals;
  // TENSOR_ALIASING: every tensor input's node, with the first slot that was
  // the same object at trace time (its own index when none was).
  struct Slot {
    const Node* node;
    const void* traced;  // address at trace time (compared, never dereferenced)
    size_t rep;
  };
  std::vector<Slot> slots;
  std::vector<size_t> reps;  // slots that were distinct objects, in order
  // The values check() fetched for the slots, held until it returns so no
  // address can be reused for another tensor meanwhile (a property may
  // return a fresh tensor on every read).
  mutable std::vector<PyRef> seen;
  mutable std::vector<PyObject*> scratch;  // sorted ids, for many inputs
  // Written by the const check(): the GIL serialises every call on a GuardSet.
  mutable std::string failure;

  Node& node_for(const ir::SourcePtr& s);
  void add(const ir::SourcePtr& s, LeafGuard g);
  void add_slot(const ir::SourcePtr& s, PyObject* tensor);
  bool check_aliasing() const;
  bool check_node(const Node& n, PyObject* parent, const ir::FrameView& frame) const;
  void print(const Node& n, std::ostringstream& os) const;
};

Node& GuardSet::Impl::node_for(const ir::SourcePtr& s) {
  TL_CHECK(s != nullptr) << "guard without a source";
  Nodes& siblings = s->base ? node_for(s->base).children : roots;
  FetchStep step(*s);
  for (auto& n : siblings)
    if (n->source == s || n->step.same_as(step)) return *n;
  siblings.push_back(std::make_unique<Node>(s));
  return *siblings.back();
}

void GuardSet::Impl::add(const ir::SourcePtr& s, LeafGuard g) {
  Node& n = node_for(s);
  for (const LeafGuard& have : n.guards)
    if (have.same_as(g)) return;
  n.guards.push_back(std::move(g));
  ++count;
}

void GuardSet::Impl::add_slot(const ir::SourcePtr& s, PyObject* tensor) {
  Node& n = node_for(s);
  if (n.slot >= 0) return;
  size_t i = slots.size();
  size_t r = i;
  for (size_t j = 0; j < i && r == i; ++j)
    if (slots[j].traced == tensor) r = j;
  n.slot = static_cast<int>(i);
  slots.push_back({&n, tensor, r});
  if (r == i) reps.push_back(i);
  seen.resize(slots.size());
  if (slots.size() == 2) ++count;  // the one TENSOR_ALIASING guard appears
}

bool GuardSet::Impl::check_aliasing() const {
  for (size_t i = 0; i < slots.size(); ++i) {
    size_t r = slots[i].rep;
    if (r != i && seen[i].get() != seen[r].get()) {
      failure = slots[r].node->label + " is " + slots[i].node->label +
                " failed: they were one tensor at trace time, now distinct tensors";
      return false;
    }
  }
  auto same = [&](size_t a, size_t b) {
    failure = slots[a].node->label + " and " + slots[b].node->label +
              " were distinct tensors at trace time, now the same tensor";
    return false;
  };
  // NOTE: pairwise for the usual few inputs (no allocation); sorted ids for
  // many (a model's weights), so the cost stays O(n log n).
  if (reps.size() <= 8) {
    for (size_t a = 0; a < reps.size(); ++a)
      for (size_t b = a + 1; b < reps.size(); ++b)
        if (seen[reps[a]].get() == seen[reps[b]].get()) return same(reps[a], reps[b]);
    return true;
  }
  scratch.clear();
  for (size_t r : reps) scratch.push_back(seen[r].get());
  std::sort(scratch.begin(), scratch.end());
  if (std::adjacent_find(scratch.begin(), scratch.end()) == scratch.end()) return true;
  for (size_t a = 0; a < reps.size(); ++a)  // slow path: name the pair
    for (size_t b = a + 1; b < reps.size(); ++b)
      if (seen[reps[a]].get() == seen[reps[b]].get()) return same(reps[a], reps[b]);
  return true;
}

bool GuardSet::Impl::check_node(const Node& n, PyObject* parent, const ir::FrameView& frame) const {
  PyRef v = n.step.apply(parent, frame);
  if (!v) {
    failure = n.label + " does not exist";
    return false;
  }
  for (const LeafGuard& g : n.guards) {
    if (!g.check(v.get())) {
      failure = g.failure(v.get(), n.label);
      return false;
    }
  }
  if (n.slot >= 0 && slots.size() >= 2) seen[n.slot] = v;
  for (const auto& child : n.children)
    if (!check_node(*child, v.get(), frame)) return false;
  return true;
}

void GuardSet::Impl::print(const Node& n, std::ostringstream& os) const {
  for (const LeafGuard& g : n.guards) os << g.str(n.label) << "\n";
  for (const auto& child : n.children) print(*child, os);
}

namespace {
// Drops the references check() took for the aliasing guard, on every return.
struct ClearSeen {
  std::vector<PyRef>& seen;
  ~ClearSeen() {
    for (PyRef& r : seen) r = PyRef();
  }
};
}  // namespace

GuardSet::GuardSet() : impl_(std::make_unique<Impl>()) {}
GuardSet::~GuardSet() = default;
GuardSet::GuardSet(GuardSet&&) noexcept = default;
GuardSet& GuardSet::operator=(GuardSet&&) noexcept = default;

void GuardSet::add_type_match(ir::SourcePtr s, PyObject* type) {
  impl_->add(s, LeafGuard::type_match(type));
}
void GuardSet::add_id_match(ir::SourcePtr s, PyObject* obj) {
  if (s && s->kind == ir::SourceKind::Local) impl_->id_locals.push_back({s->index, false, obj});
  if (s && s->kind == ir::SourceKind::Attr && s->name == "__self__" && s->base &&
      s->base->kind == ir::SourceKind::Local)
    impl_->id_locals.push_back({s->base->index, true, obj});
  impl_->add(s, LeafGuard::id_match(obj));
}
const std::vector<GuardSet::IdMatchedLocal>& GuardSet::id_matched_locals() const {
  return impl_->id_locals;
}
void GuardSet::add_equals_match(ir::SourcePtr s, PyObject* value) {
  impl_->add(s, LeafGuard::equals_match(value));
}
void GuardSet::add_tensor_match(ir::SourcePtr s, PyObject* tensor) {
  impl_->add(s, LeafGuard::tensor_match(tensor));
  impl_->add_slot(s, tensor);
}
void GuardSet::add_tensor_alias(ir::SourcePtr s, PyObject* tensor) { impl_->add_slot(s, tensor); }
void GuardSet::add_dict_version(ir::SourcePtr s, PyObject* dict) {
  impl_->add(s, LeafGuard::dict_version(dict));
}
void GuardSet::add_length_match(ir::SourcePtr s, Py_ssize_t n) {
  impl_->add(s, LeafGuard::length_match(n));
}
void GuardSet::add_global_state() {
  if (impl_->global_state) return;  // the first snapshot is the one the trace saw
  impl_->global_state.emplace();
  ++impl_->count;
}

bool GuardSet::check(const ir::FrameView& frame) const {
  const Impl& im = *impl_;
  if (im.global_state && !im.global_state->check()) {
    im.failure = im.global_state->mismatch();
    return false;
  }
  ClearSeen clear{im.seen};
  for (const auto& root : im.roots)
    if (!im.check_node(*root, nullptr, frame)) return false;
  if (im.slots.size() >= 2 && !im.check_aliasing()) return false;
  im.failure.clear();
  return true;
}

std::string GuardSet::failure_reason() const { return impl_->failure; }

std::string GuardSet::str() const {
  std::ostringstream os;
  if (impl_->global_state) os << impl_->global_state->str() << "\n";
  for (const auto& root : impl_->roots) impl_->print(*root, os);
  const Impl& im = *impl_;
  if (im.slots.size() >= 2) {
    for (size_t i = 0; i < im.slots.size(); ++i)
      if (im.slots[i].rep != i)
        os << "TENSOR_ALIASING " << im.slots[im.slots[i].rep].node->label << " is "
           << im.slots[i].node->label << "\n";
    if (im.reps.size() >= 2) {
      os << "TENSOR_ALIASING distinct:";
      for (size_t k = 0; k < im.reps.size(); ++k)
        os << (k ? ", " : " ") << im.slots[im.reps[k]].node->label;
      os << "\n";
    }
  }
  return os.str();
}

size_t GuardSet::size() const { return impl_->count; }

}  // namespace tl::guards
