#include "ir/graph.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "core/errors.h"

namespace tl::ir {

Arg Arg::of_node(Node* n) {
  Arg a;
  a.kind = Kind::Node;
  a.node = n;
  return a;
}
Arg Arg::constant(PyRef v) {
  Arg a;
  a.kind = Kind::Const;
  a.value = std::move(v);
  return a;
}
Arg Arg::tuple(std::vector<Arg> items) {
  Arg a;
  a.kind = Kind::Tuple;
  a.items = std::move(items);
  return a;
}
Arg Arg::list(std::vector<Arg> items) {
  Arg a;
  a.kind = Kind::List;
  a.items = std::move(items);
  return a;
}
Arg Arg::dict(std::vector<PyRef> keys, std::vector<Arg> values) {
  Arg a;
  a.kind = Kind::Dict;
  a.keys = std::move(keys);
  a.items = std::move(values);
  return a;
}

namespace {
std::string utf8(PyObject* s) {
  if (!s || !PyUnicode_Check(s)) return "";
  const char* c = PyUnicode_AsUTF8(s);
  if (!c) {
    PyErr_Clear();
    return "";
  }
  return c;
}

std::string dtype_short(PyObject* dtype) {
  PyRef r = PyRef::steal(PyObject_Str(dtype));
  if (!r) {
    PyErr_Clear();
    return "?";
  }
  std::string s = utf8(r.get());  // "torch.float32"
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  static const std::pair<const char*, const char*> kShort[] = {
      {"float32", "f32"}, {"float64", "f64"}, {"float16", "f16"},  {"bfloat16", "bf16"},
      {"int64", "i64"},   {"int32", "i32"},   {"int16", "i16"},    {"int8", "i8"},
      {"uint8", "u8"},    {"bool", "b8"},     {"complex64", "c64"}};
  for (auto& [l, sh] : kShort)
    if (s == l) return sh;
  return s;
}

void print_arg(std::ostream& os, const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Node:
      os << "%" << a.node->name;
      break;
    case Arg::Kind::Const:
      os << const_repr(a.value.get());
      break;
    case Arg::Kind::Tuple:
    case Arg::Kind::List: {
      bool tuple = a.kind == Arg::Kind::Tuple;
      os << (tuple ? "(" : "[");
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (i) os << ", ";
        print_arg(os, a.items[i]);
      }
      if (tuple && a.items.size() == 1) os << ",";
      os << (tuple ? ")" : "]");
      break;
    }
    case Arg::Kind::Dict: {
      os << "{";
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (i) os << ", ";
        os << const_repr(a.keys[i].get()) << ": ";
        print_arg(os, a.items[i]);
      }
      os << "}";
      break;
    }
  }
}

void check_arg(const Arg& a, const std::unordered_set<const Node*>& seen, const Node& user,
               const Graph& g) {
  if (a.kind == Arg::Kind::Node) {
    TL_CHECK(a.node && seen.count(a.node))
        << "graph lint: node %" << user.name << " uses a value that is not defined before it"
        << " (rule: arguments refer to earlier nodes)\n"
        << g.str();
  }
  for (auto& item : a.items) check_arg(item, seen, user, g);
}
}  // namespace

std::string TensorMeta::str() const {
  std::ostringstream os;
  os << dtype_short(dtype.get()) << "[";
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? "," : "") << sizes[i];
  os << "]";
  return os.str();
}

namespace {

// Whether `module`.`qualname` (module in sys.modules, attributes followed) is `fn` itself.
bool name_leads_to(const std::string& module, const std::string& qualname, PyObject* fn) {
  if (module.empty() || qualname.find('<') != std::string::npos) return false;
  PyRef name = PyRef::steal(PyUnicode_FromString(module.c_str()));
  if (!name) {
    PyErr_Clear();
    return false;
  }
  PyRef cur = PyRef::steal(PyImport_GetModule(name.get()));  // never imports
  size_t start = 0;
  while (cur && start <= qualname.size()) {
    size_t dot = qualname.find('.', start);
    std::string part = qualname.substr(start, dot == std::string::npos ? dot : dot - start);
    cur = PyRef::steal(PyObject_GetAttrString(cur.get(), part.c_str()));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (!cur) PyErr_Clear();
  return cur && cur.get() == fn;
}

}  // namespace

std::string callable_name(PyObject* fn) {
  PyRef mod = PyRef::steal(PyObject_GetAttrString(fn, "__module__"));
  if (!mod) PyErr_Clear();
  PyRef name = PyRef::steal(PyObject_GetAttrString(fn, "__qualname__"));
  if (!name) {
    PyErr_Clear();
    name = PyRef::steal(PyObject_GetAttrString(fn, "__name__"));
    if (!name) PyErr_Clear();
  }
  std::string m = utf8(mod.get());
  std::string n = name ? utf8(name.get()) : "<callable>";
  // Builtins of torch's C module print under their public namespace.
  if (m == "torch._C._VariableFunctions" || m == "torch._C" || m.empty()) m = "torch";
  if (m == "torch._C._nn") m = "torch._C._nn";
  if (m == "_operator") m = "operator";
  if (n.rfind("_VariableFunctionsClass.", 0) == 0) n = n.substr(24);
  // NOTE: torch functions made by a factory (F.max_pool2d is boolean_dispatch's
  // local `fn`) go by the __name__ the factory gave them.
  if (n.find("<locals>") != std::string::npos && m.rfind("torch", 0) == 0) {
    PyRef plain = PyRef::steal(PyObject_GetAttrString(fn, "__name__"));
    std::string p = plain ? utf8(plain.get()) : "";
    if (!plain) PyErr_Clear();
    if (!p.empty() && p.find('<') == std::string::npos) n = p;
  }
  // NOTE: functools.wraps copies the wrapped function's names: torch.func.jacrev(torch.sin)
  // calls itself torch.sin. Passes know ops by name, so a Python function whose name does not
  // lead back to it is named for its code instead.
  if (PyFunction_Check(fn) && !name_leads_to(m, n, fn)) {
    PyObject* globals_name = PyDict_GetItemString(PyFunction_GET_GLOBALS(fn), "__name__");
    auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn));
    m = globals_name && PyUnicode_Check(globals_name) ? utf8(globals_name) : "";
    n = utf8(code->co_qualname);
  }
  return m.empty() ? n : m + "." + n;
}

std::string const_repr(PyObject* v) {
  PyRef r = PyRef::steal(PyObject_Repr(v));
  if (!r) {
    PyErr_Clear();
    return "<?>";
  }
  std::string s = utf8(r.get());
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

Node* Graph::append(OpKind op, std::string base_name) {
  for (char& c : base_name)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  if (base_name.empty() || isdigit(static_cast<unsigned char>(base_name[0])))
    base_name = "v" + base_name;
  auto node = std::make_unique<Node>();
  node->id = static_cast<int>(nodes_.size());
  node->op = op;
  auto it = std::find_if(name_counts_.begin(), name_counts_.end(),
                         [&](auto& p) { return p.first == base_name; });
  if (it == name_counts_.end()) it = name_counts_.emplace(name_counts_.end(), base_name, 0);
  // NOTE: a name given (a placeholder named for a joint graph's `to_1`) can be one another base
  // makes (`to` + `_1`): each name is taken once, so names find nodes (memory plans, traces).
  std::string name = it->second == 0 ? base_name : base_name + "_" + std::to_string(it->second);
  ++it->second;
  while (!names_.insert(name).second) name = base_name + "_" + std::to_string(it->second++);
  node->name = std::move(name);
  nodes_.push_back(std::move(node));
  return nodes_.back().get();
}

Node* Graph::add_placeholder(const std::string& name, SourcePtr source) {
  Node* n = append(OpKind::Placeholder, name);
  n->source = std::move(source);
  n->target_name = "placeholder";
  return n;
}

Node* Graph::add_call_function(PyRef target, std::vector<Arg> args,
                               std::vector<std::pair<std::string, Arg>> kwargs) {
  std::string full = callable_name(target.get());
  std::string base = full.substr(full.rfind('.') + 1);
  Node* n = append(OpKind::CallFunction, base);
  n->target = std::move(target);
  n->target_name = std::move(full);
  n->args = std::move(args);
  n->kwargs = std::move(kwargs);
  return n;
}

Node* Graph::add_call_method(const std::string& method, std::vector<Arg> args,
                             std::vector<std::pair<std::string, Arg>> kwargs) {
  Node* n = append(OpKind::CallMethod, method);
  n->target_name = method;
  n->args = std::move(args);
  n->kwargs = std::move(kwargs);
  return n;
}

Node* Graph::set_output(std::vector<Arg> outputs) {
  TL_CHECK(output_ == nullptr) << "graph already has an output";
  output_ = append(OpKind::Output, "output");
  output_->target_name = "output";
  output_->args = std::move(outputs);
  return output_;
}

std::vector<Node*> Graph::placeholders() const {
  std::vector<Node*> out;
  for (auto& n : nodes_)
    if (n->op == OpKind::Placeholder) out.push_back(n.get());
  return out;
}

size_t Graph::num_ops() const {
  size_t k = 0;
  for (auto& n : nodes_) k += n->op == OpKind::CallFunction || n->op == OpKind::CallMethod;
  return k;
}

namespace {
bool refers_to(const Arg& a, const Node* n) {
  if (a.kind == Arg::Kind::Node) return a.node == n;
  for (const auto& item : a.items)
    if (refers_to(item, n)) return true;
  return false;
}
}  // namespace

void Graph::move_before(Node* n, const Node* pos) {
  if (n == pos) return;
  auto find = [&](const Node* x) {
    auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& p) { return p.get() == x; });
    TL_CHECK(it != nodes_.end()) << "move_before: %" << x->name << " is not in this graph";
    return it;
  };
  auto from = find(n);
  std::unique_ptr<Node> owned = std::move(*from);
  nodes_.erase(from);
  nodes_.insert(find(pos), std::move(owned));
  for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i]->id = static_cast<int>(i);
}

void Graph::erase(const Node* n) {
  TL_CHECK(n != output_) << "erase: the output node stays";
  for (auto& user : nodes_) {
    bool uses = false;
    for (const auto& a : user->args) uses = uses || refers_to(a, n);
    for (const auto& kw : user->kwargs) uses = uses || refers_to(kw.second, n);
    TL_CHECK(!uses) << "erase: %" << n->name << " is still used by %" << user->name << "\n"
                    << str();
  }
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& p) { return p.get() == n; });
  TL_CHECK(it != nodes_.end()) << "erase: %" << n->name << " is not in this graph";
  nodes_.erase(it);
  for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i]->id = static_cast<int>(i);
}

std::string Graph::str() const {
  std::ostringstream os;
  os << "graph(";
  bool first = true;
  for (auto& n : nodes_) {
    if (n->op != OpKind::Placeholder) continue;
    os << (first ? "" : ", ") << "%" << n->name;
    first = false;
  }
  os << "):\n";
  for (auto& n : nodes_) {
    os << "  ";
    if (n->op == OpKind::Output) {
      os << "return ";
      print_arg(os, Arg::tuple(n->args));
      os << "\n";
      continue;
    }
    os << "%" << n->name;
    if (n->meta) os << " : " << n->meta->str();
    os << " = ";
    if (n->op == OpKind::Placeholder) {
      os << "placeholder[" << (n->source ? n->source->str() : "?") << "]\n";
      continue;
    }
    if (n->op == OpKind::CallMethod) os << ".";
    os << n->target_name << "(";
    for (size_t i = 0; i < n->args.size(); ++i) {
      if (i) os << ", ";
      print_arg(os, n->args[i]);
    }
    for (size_t i = 0; i < n->kwargs.size(); ++i) {
      if (i || !n->args.empty()) os << ", ";
      os << n->kwargs[i].first << "=";
      print_arg(os, n->kwargs[i].second);
    }
    os << ")";
    if (!n->location.empty()) os << "  # " << n->location;
    os << "\n";
  }
  return os.str();
}

void Graph::lint() const {
  std::unordered_set<const Node*> seen;
  for (auto& n : nodes_) {
    for (auto& a : n->args) check_arg(a, seen, *n, *this);
    for (auto& kw : n->kwargs) check_arg(kw.second, seen, *n, *this);
    seen.insert(n.get());
  }
}

}  // namespace tl::ir
