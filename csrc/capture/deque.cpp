// collections.deque made or read by traced code: construction, its methods, its iterator.
#include "capture/deque.h"

#include <algorithm>

#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

PyObject* deque_type() {
  static PyObject* t = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("collections"));
    PyObject* d = m ? PyObject_GetAttrString(m.get(), "deque") : nullptr;
    if (!d) throw PythonError();
    return d;  // NOTE: kept for the process lifetime, like the collections module
  }();
  return t;
}

namespace {

// The maxlen of a Deque value, or -1 for None.
Py_ssize_t max_items(const Value& q) {
  return q.maxlen && q.maxlen.get() != Py_None ? PyLong_AsSsize_t(q.maxlen.get()) : -1;
}

void mutated(Value& q) { ++q.state; }

// An int argument known while tracing (a size is specialised), else a graph break: CPython
// raises eager's TypeError for anything else.
Py_ssize_t int_arg(CaptureContext& ctx, const ValuePtr& v, const std::string& what) {
  ctx.specialise(v);
  if (!v->is_const() || !PyLong_Check(v->obj.get()))
    graph_break("non_constant_argument", what + " must be an int known while tracing");
  Py_ssize_t n = PyLong_AsSsize_t(v->obj.get());
  if (n == -1 && PyErr_Occurred()) {
    clear_expected_error();
    graph_break("value_out_of_range", what + " out of range");
  }
  return n;
}

class DequeIter : public LazyIter {
 public:
  explicit DequeIter(ValuePtr q) : q_(std::move(q)), state_(q_->state) {}
  ValuePtr next(Tracer&) override {
    if (!q_) return nullptr;
    // NOTE: CPython raises RuntimeError("deque mutated during iteration") here: left to it.
    if (q_->state != state_)
      graph_break("unsupported_iteration", "a collections.deque mutated while it is iterated");
    if (pos_ >= q_->items.size()) {
      q_ = nullptr;
      return nullptr;
    }
    return q_->items[pos_++];
  }
  std::optional<std::vector<ValuePtr>> remaining() const override {
    if (!q_ || pos_ >= q_->items.size()) return std::vector<ValuePtr>{};
    return std::vector<ValuePtr>(q_->items.begin() + static_cast<long>(pos_), q_->items.end());
  }
  ValuePtr unstarted_container() const override { return pos_ == 0 ? q_ : nullptr; }
  std::optional<Live> live() const override {
    // NOTE: iter(q) advanced past pos_: CPython's iterator then sees (and refuses) what the
    // code after a break does to the deque, as eager's would.
    if (!q_ || q_->state != state_ || pos_ > q_->items.size()) return std::nullopt;
    return Live{PyRef(), {q_}, static_cast<long long>(pos_)};
  }

 private:
  ValuePtr q_;
  size_t state_;
  size_t pos_ = 0;
};

}  // namespace

ValuePtr make_deque_value(std::vector<ValuePtr> items, PyRef maxlen) {
  ValuePtr q = Value::of_kind(VKind::Deque);
  q->items = std::move(items);
  q->maxlen = maxlen ? std::move(maxlen) : PyRef::borrow(Py_None);
  Py_ssize_t m = max_items(*q);
  if (m >= 0 && q->items.size() > static_cast<size_t>(m))
    q->items.erase(q->items.begin(), q->items.end() - m);
  return q;
}

std::shared_ptr<LazyIter> deque_iter(ValuePtr deque) {
  return std::make_shared<DequeIter>(std::move(deque));
}

// deque(iterable=(), maxlen=None), by position or keyword.
ValuePtr Tracer::make_deque(std::vector<ValuePtr>& args, KwArgs& kwargs) {
  std::vector<ValuePtr> given = args;
  if (given.size() > 2)
    graph_break("unsupported_callable", "collections.deque() with more than 2 arguments");
  given.resize(2);
  for (auto& [k, v] : kwargs) {
    size_t i = k == "iterable" ? 0 : k == "maxlen" ? 1 : 2;
    if (i == 2 || given[i])  // CPython raises its TypeError
      graph_break("unsupported_callable", "collections.deque() with keyword '" + k + "'");
    given[i] = v;
  }
  PyRef maxlen = PyRef::borrow(Py_None);
  if (given[1] && !(given[1]->is_const() && given[1]->obj.get() == Py_None)) {
    Py_ssize_t m = int_arg(ctx_, given[1], "deque maxlen");
    if (m < 0) raise_user(PyExc_ValueError, "maxlen must be non-negative");
    maxlen = PyRef::steal(PyLong_FromSsize_t(m));
  }
  std::vector<ValuePtr> items;
  if (given[0]) {
    ValuePtr it = get_iter(given[0]);
    while (ValuePtr v = iter_next(it)) items.push_back(std::move(v));
  }
  return make_deque_value(std::move(items), std::move(maxlen));
}

ValuePtr Tracer::call_deque_method(const ValuePtr& self, const std::string& name,
                                   std::vector<ValuePtr>& args, KwArgs& kwargs) {
  Value& q = *self;
  auto& items = q.items;
  const Py_ssize_t max = max_items(q);
  const size_t nargs = args.size();
  auto changed = [&] {
    mutated(q);
    mark_mutated(self);
  };
  // NOTE: a full deque drops from the other end, as CPython's does (maxlen 0 keeps nothing).
  auto push_right = [&](ValuePtr v) {
    items.push_back(std::move(v));
    if (max >= 0 && items.size() > static_cast<size_t>(max)) items.erase(items.begin());
  };
  auto push_left = [&](ValuePtr v) {
    items.insert(items.begin(), std::move(v));
    if (max >= 0 && items.size() > static_cast<size_t>(max)) items.pop_back();
  };
  // Identity first, then ==, as deque's count/index/remove compare.
  auto equals = [&](const ValuePtr& e, const ValuePtr& x) {
    if (e == x) return true;
    bool is_object = e->kind == VKind::Object || e->kind == VKind::Module || e->is_const();
    if (is_object && e->obj && x->obj && e->obj.get() == x->obj.get()) return true;
    return truth(compare(2, e, x));
  };
  if (kwargs.empty()) {
    if ((name == "append" || name == "appendleft") && nargs == 1) {
      name == "append" ? push_right(args[0]) : push_left(args[0]);
      changed();
      return none();
    }
    if ((name == "extend" || name == "extendleft") && nargs == 1) {
      // NOTE: extending a deque with itself reads a copy first, as CPython does.
      ValuePtr it = get_iter(args[0] == self ? Value::list(items) : args[0]);
      while (ValuePtr v = iter_next(it)) {
        name == "extend" ? push_right(std::move(v)) : push_left(std::move(v));
        changed();
      }
      return none();
    }
    if ((name == "pop" || name == "popleft") && nargs == 0) {
      if (items.empty()) raise_user(PyExc_IndexError, "pop from an empty deque");
      ValuePtr v;
      if (name == "pop") {
        v = items.back();
        items.pop_back();
      } else {
        v = items.front();
        items.erase(items.begin());
      }
      changed();
      return v;
    }
    if (name == "rotate" && nargs <= 1) {
      Py_ssize_t n = nargs ? int_arg(ctx_, args[0], "deque.rotate()'s argument") : 1;
      const auto len = static_cast<Py_ssize_t>(items.size());
      if (len > 1) {
        Py_ssize_t k = ((n % len) + len) % len;  // to the right
        std::rotate(items.begin(), items.end() - k, items.end());
      }
      changed();
      return none();
    }
    if (name == "clear" && nargs == 0) {
      items.clear();
      changed();
      return none();
    }
    if (name == "reverse" && nargs == 0) {
      std::reverse(items.begin(), items.end());
      changed();
      return none();
    }
    if ((name == "copy" || name == "__copy__") && nargs == 0)
      return make_deque_value(items, q.maxlen);
    if (name == "insert" && nargs == 2) {
      if (max >= 0 && items.size() >= static_cast<size_t>(max))
        raise_user(PyExc_IndexError, "deque already at its maximum size");
      Py_ssize_t i = int_arg(ctx_, args[0], "deque.insert()'s index");
      const auto n = static_cast<Py_ssize_t>(items.size());
      i = i < 0 ? std::max<Py_ssize_t>(0, i + n) : std::min(i, n);
      items.insert(items.begin() + i, args[1]);
      changed();
      return none();
    }
    if (name == "count" && nargs == 1) {
      long long c = 0;
      for (const ValuePtr& e : std::vector<ValuePtr>(items)) c += equals(e, args[0]) ? 1 : 0;
      return const_int(c);
    }
    if ((name == "index" || name == "remove") && nargs == 1) {
      const std::vector<ValuePtr> snapshot = items;
      for (size_t i = 0; i < snapshot.size(); ++i) {
        if (!equals(snapshot[i], args[0])) continue;
        if (name == "index") return const_int(static_cast<long long>(i));
        items.erase(items.begin() + static_cast<long>(i));
        changed();
        return none();
      }
      if (name == "index" && !args[0]->is_const())
        graph_break("non_constant_argument",
                    "deque.index() of a " + args[0]->type_name() + " that is not in the deque");
      raise_user(PyExc_ValueError, name == "index"
                                       ? ir::const_repr(args[0]->obj.get()) + " is not in deque"
                                       : "deque.remove(x): x not in deque");
    }
    if (name == "__len__" && nargs == 0) return const_int(static_cast<long long>(items.size()));
    if (name == "__getitem__" && nargs == 1) return subscript(self, args[0]);
  }
  graph_break("unsupported_callable", "collections.deque." + name + "() with these arguments");
}

}  // namespace tl::capture
