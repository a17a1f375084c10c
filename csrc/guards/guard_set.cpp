#include "guards/guard_set.h"

#include <optional>
#include <sstream>
#include <utility>

#include "core/errors.h"
#include "guards/fetch.h"
#include "guards/global_state.h"
#include "guards/leaf_guard.h"
#include "guards/storage_aliasing.h"
#include "guards/torch_refs.h"

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
  // SIZE_RELATION symbols that are sizes of this value: (dim, symbol index). Read right after
  // its guards passed, from the value already fetched.
  std::vector<std::pair<int, size_t>> symbol_dims;
  std::vector<size_t> input_slots;  // GuardSet::bind_inputs: graph inputs this value is

  explicit Node(ir::SourcePtr s) : source(s), label(s->str()), step(*s) {}
};
using Nodes = std::vector<std::unique_ptr<Node>>;

bool is_module(PyObject* v) {
  PyObject* type = torch_refs().module_type;
  return type && PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject*>(type));
}

// `a is b` (or `is not`) between two sources, checked after the tree.
struct Identity {
  std::string a, b;  // labels
  SourceFetcher fetch_a, fetch_b;
  bool same;
};

// `n == expr(sizes)` for an int `n` (GuardSet::add_int_equals_sizes), checked after the tree.
struct IntEqualsSize {
  std::string n, text;  // label of n; "L['x'].size(1) // 2"
  SourceFetcher fetch_n;
  ir::SymExprPtr expr;
  std::vector<std::pair<SourceFetcher, int>> sizes;
};
}  // namespace

struct GuardSet::Impl {
  std::optional<GlobalState> global_state;
  Nodes roots;  // in insertion order; children likewise
  size_t count = 0;
  std::vector<GuardSet::IdMatchedLocal> id_locals;
  std::vector<Identity> identities;
  std::vector<IntEqualsSize> int_sizes;
  std::optional<StorageAliasing> storage_aliasing;
  std::optional<SizeRelations> size_relations;
  mutable std::vector<int64_t> symbol_values;  // one per SizeRelations symbol, per check
  // Builtins the trace read: names that must stay absent from the frame's
  // globals, re-checked only when the globals dict changed.
  std::vector<PyRef> absent_globals;
  mutable uint64_t globals_version = 0;
  mutable PyObject* globals_seen = nullptr;  // compared only, never dereferenced
  // Written by the const check(): the GIL serialises every call on a GuardSet.
  mutable std::string failure;
  mutable bool failure_in_kept_object = false;  // see failed_in_kept_object()
  size_t n_inputs = 0;                          // bind_inputs
  mutable size_t first_root = 0;                // the root whose guards failed last (check())
  std::vector<std::pair<ir::SourcePtr, PyRef>> number_reads;  // note_number_read

  Node& node_for(const ir::SourcePtr& s);
  Node* find_node(const ir::SourcePtr& s);  // null: no guard reads `s`
  void add(const ir::SourcePtr& s, LeafGuard g);
  // `kept`: the value is read from an nn.Module matched by identity.
  // `inputs`: where the values of bound inputs go (check()'s), or null.
  bool check_node(const Node& n, PyObject* parent, const ir::FrameView& frame, bool kept,
                  std::vector<PyRef>* inputs) const;
  bool check_absent_globals(PyObject* globals) const;
  bool read_symbols(const Node& n, PyObject* v) const;
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

Node* GuardSet::Impl::find_node(const ir::SourcePtr& s) {
  if (!s) return nullptr;
  Nodes* siblings = &roots;
  if (s->base) {
    Node* base = find_node(s->base);
    if (!base) return nullptr;
    siblings = &base->children;
  }
  FetchStep step(*s);
  for (auto& n : *siblings)
    if (n->source == s || n->step.same_as(step)) return n.get();
  return nullptr;
}

void GuardSet::Impl::add(const ir::SourcePtr& s, LeafGuard g) {
  Node& n = node_for(s);
  for (const LeafGuard& have : n.guards)
    if (have.same_as(g)) return;
  n.guards.push_back(std::move(g));
  ++count;
}

bool GuardSet::Impl::check_node(const Node& n, PyObject* parent, const ir::FrameView& frame,
                                bool kept, std::vector<PyRef>* inputs) const {
  PyRef v = n.step.apply(parent, frame);
  failure_in_kept_object = kept;
  if (!v) {
    failure = n.label + " does not exist";
    return false;
  }
  bool children_kept = kept;
  for (const LeafGuard& g : n.guards) {
    if (!g.check(v.get())) {
      failure = g.failure(v.get(), n.label);
      return false;
    }
    children_kept = children_kept || (g.kind == GuardKind::IdMatch && is_module(v.get()));
  }
  if (!n.symbol_dims.empty() && !read_symbols(n, v.get())) return false;
  if (inputs)
    for (size_t slot : n.input_slots) (*inputs)[slot] = v;
  for (const auto& child : n.children)
    if (!check_node(*child, v.get(), frame, children_kept, inputs)) return false;
  return true;
}

bool GuardSet::Impl::read_symbols(const Node& n, PyObject* v) const {
  // NOTE: through the TENSOR_MATCH's getter when there is one (it just read this tensor's
  // metadata): no attribute lookup by name.
  const TensorMatch* tm = nullptr;
  for (const LeafGuard& g : n.guards)
    if (g.kind == GuardKind::TensorMatch && g.tensor) tm = g.tensor.get();
  static PyObject* const shape_name = PyUnicode_InternFromString("shape");  // immortal by use
  PyRef shape = tm ? tm->shape_of(v) : PyRef::steal(PyObject_GetAttr(v, shape_name));
  if (!shape || !PyTuple_Check(shape.get())) {
    clear_expected_error();
    failure = "SIZE_RELATION: " + n.label + " has no shape";
    return false;
  }
  for (const auto& [dim, k] : n.symbol_dims) {
    if (dim >= PyTuple_GET_SIZE(shape.get())) {
      failure = "SIZE_RELATION: " + n.label + " has no size " + std::to_string(dim);
      return false;
    }
    symbol_values[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), dim));
    if (symbol_values[k] == -1 && PyErr_Occurred()) {
      clear_expected_error();
      failure = "SIZE_RELATION: unreadable size of " + n.label;
      return false;
    }
  }
  return true;
}

bool GuardSet::Impl::check_absent_globals(PyObject* globals) const {
  if (absent_globals.empty()) return true;
  uint64_t now = dict_version_of(globals);
  if (globals == globals_seen && now == globals_version) return true;
  for (const PyRef& name : absent_globals) {
    if (PyDict_GetItemWithError(globals, name.get())) {
      failure = "G['" + std::string(PyUnicode_AsUTF8(name.get())) + "'] now shadows the builtin";
      return false;
    }
    if (PyErr_Occurred()) throw PythonError();
  }
  globals_seen = globals;
  globals_version = now;
  return true;
}

void GuardSet::Impl::print(const Node& n, std::ostringstream& os) const {
  for (const LeafGuard& g : n.guards) os << g.str(n.label) << "\n";
  for (const auto& child : n.children) print(*child, os);
}

GuardSet::GuardSet() : impl_(std::make_unique<Impl>()) {}
GuardSet::~GuardSet() = default;
GuardSet::GuardSet(GuardSet&&) noexcept = default;
GuardSet& GuardSet::operator=(GuardSet&&) noexcept = default;

void GuardSet::add_type_match(ir::SourcePtr s, PyObject* type) {
  impl_->add(s, LeafGuard::type_match(type));
}
void GuardSet::add_number_type(ir::SourcePtr s, PyObject* number, bool narrow) {
  impl_->add(s, LeafGuard::number_type(number, narrow));
}
void GuardSet::add_id_match(ir::SourcePtr s, PyObject* obj) {
  auto weak = [&] {
    if (!PyType_SUPPORTS_WEAKREFS(Py_TYPE(obj))) return PyRef();
    PyRef r = PyRef::steal(PyWeakref_NewRef(obj, nullptr));
    if (!r) throw PythonError();
    return r;
  };
  if (s && s->kind == ir::SourceKind::Local)
    impl_->id_locals.push_back({s->index, false, obj, weak()});
  if (s && s->kind == ir::SourceKind::Attr && s->name == "__self__" && s->base &&
      s->base->kind == ir::SourceKind::Local)
    impl_->id_locals.push_back({s->base->index, true, obj, weak()});
  impl_->add(s, LeafGuard::id_match(obj));
}
const std::vector<GuardSet::IdMatchedLocal>& GuardSet::id_matched_locals() const {
  return impl_->id_locals;
}
bool GuardSet::id_matched_local_freed() const {
  for (const IdMatchedLocal& m : impl_->id_locals)
    if (m.ref && PyWeakref_GET_OBJECT(m.ref.get()) == Py_None) return true;
  return false;
}
void GuardSet::relax_dict_item(const ir::SourcePtr& dict_src, PyObject* key) {
  for (LeafGuard& g : impl_->node_for(dict_src).guards)
    if (g.kind == GuardKind::DictVersion && g.snapshot) {
      g.snapshot = std::make_shared<const DictSnapshot>(g.snapshot->with_type_only(key));
      g.version = 0;  // NOTE: never a dict's version tag: the snapshot decides the next check
    }
}
void GuardSet::note_number_read(ir::SourcePtr s, PyObject* value) {
  impl_->number_reads.emplace_back(std::move(s), PyRef::borrow(value));
}
std::vector<std::string> GuardSet::changed_numbers(const ir::FrameView& frame) const {
  std::vector<std::string> out;
  for (const auto& [src, value] : impl_->number_reads) {
    PyRef now = fetch(*src, frame);
    if (!now) {
      PyErr_Clear();
      continue;
    }
    if (Py_TYPE(now.get()) != Py_TYPE(value.get())) continue;
    int same = PyObject_RichCompareBool(now.get(), value.get(), Py_EQ);
    if (same < 0) PyErr_Clear();
    if (same == 0) out.push_back(src->str());
  }
  return out;
}
void GuardSet::add_equals_match(ir::SourcePtr s, PyObject* value) {
  impl_->add(s, LeafGuard::equals_match(value));
}
void GuardSet::add_tensor_match(ir::SourcePtr s, PyObject* tensor) {
  impl_->add(s, LeafGuard::tensor_match(tensor));
}
bool GuardSet::make_sizes_dynamic(const ir::SourcePtr& s,
                                  std::vector<TensorMatch::DynamicDim> dims) {
  for (LeafGuard& g : impl_->node_for(s).guards) {
    if (g.kind != GuardKind::TensorMatch || !g.tensor) continue;
    g.tensor = std::make_shared<const TensorMatch>(g.tensor->with_dynamic_dims(std::move(dims)));
    return true;
  }
  return false;
}
size_t GuardSet::make_all_sizes_dynamic(int64_t min_size) {
  return make_sizes_dynamic_except({}, min_size);
}
size_t GuardSet::make_sizes_dynamic_except(const std::set<std::string>& kept, int64_t min_size,
                                           bool any_strides) {
  size_t changed = 0;
  std::vector<Node*> todo;
  for (auto& r : impl_->roots) todo.push_back(r.get());
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    for (auto& c : n->children) todo.push_back(c.get());
    if (kept.count(n->label)) continue;
    for (LeafGuard& g : n->guards) {
      if (g.kind != GuardKind::TensorMatch || !g.tensor || g.tensor->is_dynamic()) continue;
      TensorMatch relaxed = g.tensor->with_all_sizes_dynamic(min_size, any_strides);
      if (!relaxed.is_dynamic()) continue;
      g.tensor = std::make_shared<const TensorMatch>(std::move(relaxed));
      changed++;
    }
  }
  return changed;
}
void GuardSet::set_size_relations(SizeRelations relations) {
  if (!impl_->size_relations) ++impl_->count;
  std::vector<Node*> todo;
  for (auto& r : impl_->roots) todo.push_back(r.get());
  while (!todo.empty()) {  // NOTE: relations set before are replaced: so are their symbols
    Node* n = todo.back();
    todo.pop_back();
    n->symbol_dims.clear();
    for (auto& c : n->children) todo.push_back(c.get());
  }
  const auto& symbols = relations.symbols();
  for (size_t k = 0; k < symbols.size(); ++k)
    impl_->node_for(symbols[k].source).symbol_dims.emplace_back(symbols[k].dim, k);
  impl_->symbol_values.assign(symbols.size(), 0);
  impl_->size_relations.emplace(std::move(relations));
}
bool GuardSet::has_size_relations() const { return impl_->size_relations.has_value(); }
void GuardSet::add_dict_version(ir::SourcePtr s, PyObject* dict) {
  impl_->add(s, LeafGuard::dict_version(dict));
}
void GuardSet::add_dict_keys(ir::SourcePtr s, PyObject* dict) {
  impl_->add(s, LeafGuard::dict_keys(dict));
}
void GuardSet::add_length_match(ir::SourcePtr s, Py_ssize_t n) {
  impl_->add(s, LeafGuard::length_match(n));
}
void GuardSet::add_empty_dict_attr(ir::SourcePtr s, PyObject* owner, const char* name) {
  PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
  if (!key) throw PythonError();
  if (std::optional<LeafGuard> g = LeafGuard::empty_dict_attr(owner, key.get())) {
    // NOTE: one guard per owner for all its empty dicts (a module's four hook dicts).
    for (LeafGuard& have : impl_->node_for(s).guards) {
      if (have.kind != GuardKind::EmptyDictAttr) continue;
      if (have.ref.get() == key.get()) return;
      for (const PyRef& name : have.more_names)
        if (name.get() == key.get()) return;
      have.more_names.push_back(std::move(key));
      return;
    }
    impl_->add(s, std::move(*g));
  } else
    impl_->add(ir::Source::attr(s, name), LeafGuard::length_match(0));
}

void GuardSet::add_attr(ir::SourcePtr s, AttrTable::Owner owner, PyObject* owner_obj,
                        PyObject* name, PyObject* found, PyObject* after) {
  Node& n = impl_->node_for(s);
  for (LeafGuard& g : n.guards)
    if (g.kind == GuardKind::AttrTable && g.table->owner() == owner) {
      g.table->add(name, found, after);
      return;
    }
  LeafGuard g = LeafGuard::attr_table(owner, owner_obj);
  g.table->add(name, found, after);
  n.guards.push_back(std::move(g));
  ++impl_->count;
}
void GuardSet::add_no_instance_attr(ir::SourcePtr s, PyObject* name) {
  PyObject* k = name;
  Py_INCREF(k);
  PyUnicode_InternInPlace(&k);  // same_as compares interned pointers
  PyRef key = PyRef::steal(k);
  impl_->add(s, LeafGuard::no_instance_attr(key.get()));
}
void GuardSet::add_set_match(ir::SourcePtr s, PyObject* set) {
  impl_->add(s, LeafGuard::set_match(set));
}
void GuardSet::add_function_defaults(ir::SourcePtr s, PyObject* fn) {
  impl_->add(s, LeafGuard::function_defaults(fn));
}
void GuardSet::add_call_result(PyObject* fn, PyObject* result) {
  impl_->add(ir::Source::held(PyRef::borrow(fn), "state query"), LeafGuard::call_result(result));
}
void GuardSet::add_global_absent(const std::string& name) {
  for (const PyRef& have : impl_->absent_globals)
    if (PyUnicode_CompareWithASCIIString(have.get(), name.c_str()) == 0) return;
  PyRef key = PyRef::steal(PyUnicode_InternFromString(name.c_str()));
  if (!key) throw PythonError();
  impl_->absent_globals.push_back(std::move(key));
  ++impl_->count;
}

void GuardSet::add_identity(ir::SourcePtr a, ir::SourcePtr b, bool same) {
  TL_CHECK(a && b) << "identity guard without a source";
  std::string la = a->str(), lb = b->str();
  if (lb < la) {
    std::swap(la, lb);
    std::swap(a, b);
  }
  for (const Identity& id : impl_->identities)
    if (id.a == la && id.b == lb) return;
  impl_->identities.push_back({la, lb, SourceFetcher(*a), SourceFetcher(*b), same});
  ++impl_->count;
}
void GuardSet::add_int_equals_sizes(ir::SourcePtr n, ir::SymExprPtr expr,
                                    std::vector<std::pair<ir::SourcePtr, int>> sizes) {
  TL_CHECK(n && expr) << "size-equality guard without a source";
  std::string text = expr->str(), names;
  for (size_t k = 0; k < sizes.size(); ++k) {
    TL_CHECK(sizes[k].first) << "size-equality guard on a size without a source";
    names += std::string(names.empty() ? "; " : ", ") + "s" + std::to_string(k) + " = " +
             sizes[k].first->str() + ".size(" + std::to_string(sizes[k].second) + ")";
  }
  text += names;
  std::string ln = n->str();
  for (const IntEqualsSize& g : impl_->int_sizes)
    if (g.n == ln && g.text == text) return;
  IntEqualsSize g{ln, text, SourceFetcher(*n), std::move(expr), {}};
  for (const auto& [src, dim] : sizes) g.sizes.emplace_back(SourceFetcher(*src), dim);
  impl_->int_sizes.push_back(std::move(g));
  ++impl_->count;
}

namespace {
// The size `dim` of `t` (a tensor), or -1 (no error left set).
int64_t size_of(PyObject* t, int dim) {
  static PyObject* const shape_name = PyUnicode_InternFromString("shape");  // immortal by use
  PyRef shape = PyRef::steal(PyObject_GetAttr(t, shape_name));
  if (!shape || !PyTuple_Check(shape.get()) || dim >= PyTuple_GET_SIZE(shape.get())) {
    clear_expected_error();
    return -1;
  }
  return PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), dim));
}
}  // namespace

void GuardSet::add_storage_aliasing(const std::vector<ir::SourcePtr>& sources,
                                    const std::vector<PyObject*>& tensors) {
  if (impl_->storage_aliasing) return;
  impl_->storage_aliasing.emplace(sources, tensors);
  ++impl_->count;
}

void GuardSet::add_global_state() {
  if (impl_->global_state) return;  // the first snapshot is the one the trace saw
  impl_->global_state.emplace();
  ++impl_->count;
}

size_t GuardSet::bind_inputs(const std::vector<ir::SourcePtr>& sources) {
  size_t bound = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    Node* n = impl_->find_node(sources[i]);
    if (!n) continue;
    n->input_slots.push_back(i);
    ++bound;
  }
  impl_->n_inputs = sources.size();
  return bound;
}

bool GuardSet::check(const ir::FrameView& frame, bool global_state,
                     std::vector<PyRef>* inputs) const {
  // NOTE: the values go to the caller's vector, passed down (not kept in Impl): a guard that
  // runs Python code may let another thread check this set meanwhile.
  if (inputs) inputs->assign(impl_->n_inputs, PyRef());
  bool passed = false;
  try {
    passed = check_tree(frame, global_state, inputs);
  } catch (...) {
    if (inputs) inputs->clear();
    throw;
  }
  if (inputs && !passed) inputs->clear();  // NOTE: a failure keeps no input alive
  return passed;
}

bool GuardSet::check_tree(const ir::FrameView& frame, bool global_state,
                          std::vector<PyRef>* inputs) const {
  const Impl& im = *impl_;
  im.failure_in_kept_object = false;
  if (global_state && im.global_state && !im.global_state->check()) {
    im.failure = im.global_state->mismatch();
    return false;
  }
  // NOTE: the root that failed last is checked first (fail fast, as Dynamo sorts its accessors
  // by failures): two entries a call alternates between (a flag argument) would otherwise walk
  // the whole model's subtree before the argument that tells them apart.
  const size_t n_roots = im.roots.size();
  for (size_t k = 0; k < n_roots; ++k) {
    size_t r = k == 0 ? im.first_root : (k <= im.first_root ? k - 1 : k);
    if (!im.check_node(*im.roots[r], nullptr, frame, false, inputs)) {
      im.first_root = r;
      return false;
    }
  }
  if (!im.check_absent_globals(frame.globals)) return false;
  for (const Identity& id : im.identities) {
    PyRef a = id.fetch_a(frame), b = id.fetch_b(frame);
    if (!a || !b || (a.get() == b.get()) != id.same) {
      im.failure = id.a + (id.same ? " is not " : " is ") + id.b;
      return false;
    }
  }
  for (const IntEqualsSize& g : im.int_sizes) {
    PyRef n = g.fetch_n(frame);
    bool holds = n && PyLong_CheckExact(n.get());
    std::vector<int64_t> values;
    for (size_t k = 0; holds && k < g.sizes.size(); ++k) {
      PyRef t = g.sizes[k].first(frame);
      values.push_back(t ? size_of(t.get(), g.sizes[k].second) : -1);
      holds = values.back() >= 0;
    }
    int overflow = 0;
    try {
      holds = holds && PyLong_AsLongLongAndOverflow(n.get(), &overflow) == g.expr->eval(values) &&
              !overflow;
    } catch (const std::exception&) {  // NOTE: a division by a size that is 0 now
      holds = false;
    }
    if (!holds) {
      clear_expected_error();
      im.failure = "SIZE_EQUALS " + g.n + " == " + g.text + ": false";
      return false;
    }
  }
  if (im.storage_aliasing && !im.storage_aliasing->check(frame)) {
    im.failure = im.storage_aliasing->failure();
    return false;
  }
  // NOTE: the tree above read every symbol's value (Impl::read_symbols).
  if (im.size_relations && !im.size_relations->holds(im.symbol_values)) {
    im.failure = im.size_relations->failure();
    return false;
  }
  im.failure.clear();
  return true;
}

std::string GuardSet::failure_reason() const { return impl_->failure; }
bool GuardSet::failed_in_kept_object() const { return impl_->failure_in_kept_object; }

std::string GuardSet::str() const {
  std::ostringstream os;
  if (impl_->global_state) os << impl_->global_state->str() << "\n";
  for (const auto& root : impl_->roots) impl_->print(*root, os);
  for (const PyRef& name : impl_->absent_globals)
    os << "GLOBAL_ABSENT G['" << PyUnicode_AsUTF8(name.get()) << "']\n";
  for (const Identity& id : impl_->identities)
    os << "IDENTITY " << id.a << (id.same ? " is " : " is not ") << id.b << "\n";
  for (const IntEqualsSize& g : impl_->int_sizes)
    os << "SIZE_EQUALS " << g.n << " == " << g.text << "\n";
  if (impl_->storage_aliasing) os << impl_->storage_aliasing->str() << "\n";
  if (impl_->size_relations) os << impl_->size_relations->str();
  return os.str();
}

size_t GuardSet::size() const { return impl_->count; }

}  // namespace tl::guards
