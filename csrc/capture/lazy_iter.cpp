#include "capture/lazy_iter.h"

#include <algorithm>

#include "capture/py_helpers.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

class ListIter : public LazyIter {
 public:
  explicit ListIter(ValuePtr list) : list_(std::move(list)) {}
  ValuePtr next(Tracer&) override {
    // NOTE: CPython's list iterator drops the list once exhausted: later appends are unseen.
    if (!list_ || pos_ >= list_->items.size()) {
      list_ = nullptr;
      return nullptr;
    }
    return list_->items[pos_++];
  }
  std::optional<std::vector<ValuePtr>> remaining() const override {
    if (!list_ || pos_ >= list_->items.size()) return std::vector<ValuePtr>{};
    return std::vector<ValuePtr>(list_->items.begin() + static_cast<long>(pos_),
                                 list_->items.end());
  }
  ValuePtr unstarted_container() const override { return pos_ == 0 ? list_ : nullptr; }
  std::optional<Live> live() const override {
    // NOTE: past the end (the trace shrank the list) CPython's iterator keeps its index; a
    // new one could not, so that stays a snapshot (empty: exact unless the list grows back).
    if (!list_ || pos_ > list_->items.size()) return std::nullopt;
    return Live{PyRef(), {list_}, static_cast<long long>(pos_)};
  }

 private:
  ValuePtr list_;
  size_t pos_ = 0;
};

class ListReverseIter : public LazyIter {
 public:
  explicit ListReverseIter(ValuePtr list)
      : list_(std::move(list)), pos_(static_cast<long long>(list_->items.size()) - 1) {}
  ValuePtr next(Tracer&) override {
    if (!list_ || pos_ < 0 || pos_ >= static_cast<long long>(list_->items.size())) {
      list_ = nullptr;
      return nullptr;
    }
    return list_->items[pos_--];
  }
  std::optional<Live> live() const override {
    const long long n = list_ ? static_cast<long long>(list_->items.size()) : 0;
    if (!list_ || pos_ >= n) return std::nullopt;
    return Live{
        PyRef::borrow(reinterpret_cast<PyObject*>(&PyReversed_Type)), {list_}, n - 1 - pos_};
  }

 private:
  ValuePtr list_;
  long long pos_;
};

class DictIter : public LazyIter {
 public:
  DictIter(ValuePtr dict, std::string what)
      : dict_(std::move(dict)), what_(std::move(what)), size_(dict_->keys.size()) {}
  ValuePtr next(Tracer&) override {
    if (!dict_) return nullptr;
    if (dict_->keys.size() != size_) {
      size_ = SIZE_MAX;  // CPython keeps raising on later next() calls too
      raise_user(PyExc_RuntimeError, "dictionary changed size during iteration");
    }
    if (pos_ >= size_) {
      dict_ = nullptr;
      return nullptr;
    }
    size_t i = pos_++;
    ValuePtr key = Value::constant(dict_->keys[i]);
    if (what_ == "values") return dict_->items[i];
    if (what_ == "items") return Value::tuple({key, dict_->items[i]});
    return key;
  }
  std::optional<std::vector<ValuePtr>> remaining() const override {
    std::vector<ValuePtr> out;
    if (!dict_) return out;
    if (dict_->keys.size() != size_) return std::nullopt;  // next() raises
    for (size_t i = pos_; i < size_; ++i) {
      ValuePtr key = Value::constant(dict_->keys[i]);
      out.push_back(what_ == "values"  ? dict_->items[i]
                    : what_ == "items" ? Value::tuple({key, dict_->items[i]})
                                       : key);
    }
    return out;
  }
  ValuePtr unstarted_container() const override {
    return pos_ == 0 && what_ == "keys" && dict_ && dict_->keys.size() == size_ ? dict_ : nullptr;
  }
  std::optional<Live> live() const override {
    if (!dict_ || dict_->keys.size() != size_) return std::nullopt;
    // NOTE: d.items() called on the object itself: an OrderedDict's own order.
    PyRef op = PyRef::steal(PyImport_ImportModule("operator"));
    PyRef caller =
        op ? PyRef::steal(PyObject_CallMethod(op.get(), "methodcaller", "s", what_.c_str()))
           : PyRef();
    if (!caller) throw PythonError();
    return Live{caller, {dict_}, static_cast<long long>(pos_)};
  }

 private:
  ValuePtr dict_;
  std::string what_;
  size_t size_;
  size_t pos_ = 0;
};

class MapIter : public LazyIter {
 public:
  MapIter(ValuePtr fn, std::vector<ValuePtr> its) : fn_(std::move(fn)), its_(std::move(its)) {}
  ValuePtr next(Tracer& t) override {
    if (done_) return nullptr;
    std::vector<ValuePtr> args;
    for (auto& it : its_) {
      ValuePtr v = t.iter_next(it);
      if (!v) {
        done_ = true;
        return nullptr;
      }
      args.push_back(std::move(v));
    }
    if (!fn_) return Value::tuple(std::move(args));  // zip
    return t.call(fn_, std::move(args), {});
  }
  std::optional<std::vector<ValuePtr>> remaining() const override {
    if (fn_) return std::nullopt;  // map: calls its function
    if (done_) return std::vector<ValuePtr>{};
    std::vector<std::vector<ValuePtr>> parts;
    size_t n = SIZE_MAX;
    for (auto& it : its_) {
      auto r = remaining_items(it);
      if (!r) return std::nullopt;
      n = std::min(n, r->size());
      parts.push_back(std::move(*r));
    }
    if (parts.empty()) n = 0;
    if (shares_an_iterator()) return std::nullopt;  // zip(it, it) takes turns
    std::vector<ValuePtr> out;
    for (size_t i = 0; i < n; ++i) {
      std::vector<ValuePtr> t;
      for (auto& p : parts) t.push_back(p[i]);
      out.push_back(Value::tuple(std::move(t)));
    }
    return out;
  }
  std::optional<Live> live() const override {
    if (fn_ || done_ || shares_an_iterator()) return std::nullopt;
    bool any = false;
    for (auto& it : its_) any = any || live_iterator(it).has_value();
    if (!any) return std::nullopt;
    return Live{PyRef::borrow(reinterpret_cast<PyObject*>(&PyZip_Type)), its_, 0};
  }

 private:
  bool shares_an_iterator() const {
    for (size_t i = 0; i < its_.size(); ++i)
      for (size_t j = i + 1; j < its_.size(); ++j)
        if (its_[i] == its_[j]) return true;
    return false;
  }
  ValuePtr fn_;
  std::vector<ValuePtr> its_;
  bool done_ = false;
};

// itertools.count(start, step) over ints: endless, so never a snapshot; CPython makes it again
// as count(next value, step).
class CountIter : public LazyIter {
 public:
  CountIter(long long start, long long step) : next_(start), step_(step) {}
  ValuePtr next(Tracer&) override {
    ValuePtr v = const_int(next_);
    next_ += step_;
    return v;
  }
  std::optional<Live> live() const override {
    static PyObject* count = [] {
      PyRef m = PyRef::steal(PyImport_ImportModule("itertools"));
      PyObject* c = m ? PyObject_GetAttrString(m.get(), "count") : nullptr;
      if (!c) throw PythonError();
      return c;  // NOTE: kept for the process lifetime, like the module
    }();
    return Live{PyRef::borrow(count), {const_int(next_), const_int(step_)}, 0};
  }

 private:
  long long next_, step_;
};

// itertools.chain: the items of each iterable `outer` gives, in turn; each is iter()'d when
// reached, as CPython's chain does.
class ChainIter : public LazyIter {
 public:
  explicit ChainIter(ValuePtr outer) : outer_(std::move(outer)) {}
  ValuePtr next(Tracer& t) override {
    while (true) {
      if (current_) {
        if (ValuePtr v = t.iter_next(current_)) return v;
        current_ = nullptr;
      }
      if (!outer_) return nullptr;
      ValuePtr iterable = t.iter_next(outer_);
      if (!iterable) {
        outer_ = nullptr;
        return nullptr;
      }
      current_ = t.get_iter(iterable);
    }
  }

 private:
  ValuePtr outer_, current_;
};

class EnumerateIter : public LazyIter {
 public:
  EnumerateIter(ValuePtr it, long long start) : it_(std::move(it)), count_(start) {}
  ValuePtr next(Tracer& t) override {
    ValuePtr v = t.iter_next(it_);
    if (!v) return nullptr;
    return Value::tuple({const_int(count_++), v});
  }
  std::optional<std::vector<ValuePtr>> remaining() const override {
    auto r = remaining_items(it_);
    if (!r) return std::nullopt;
    std::vector<ValuePtr> out;
    long long i = count_;
    for (auto& v : *r) out.push_back(Value::tuple({const_int(i++), v}));
    return out;
  }
  std::optional<Live> live() const override {
    if (!live_iterator(it_)) return std::nullopt;
    return Live{
        PyRef::borrow(reinterpret_cast<PyObject*>(&PyEnum_Type)), {it_, const_int(count_)}, 0};
  }

 private:
  ValuePtr it_;
  long long count_;
};

class FilterIter : public LazyIter {
 public:
  FilterIter(ValuePtr fn, ValuePtr it) : fn_(std::move(fn)), it_(std::move(it)) {}
  ValuePtr next(Tracer& t) override {
    while (ValuePtr v = t.iter_next(it_)) {
      if (t.truth(fn_ ? t.call(fn_, {v}, {}) : v)) return v;
    }
    return nullptr;
  }

 private:
  ValuePtr fn_;
  ValuePtr it_;
};

class GeneratorIter : public LazyIter {
 public:
  explicit GeneratorIter(std::shared_ptr<Tracer> body) : body_(std::move(body)) {}
  ValuePtr next(Tracer&) override {
    if (!body_) return nullptr;
    if (running_) raise_user(PyExc_ValueError, "generator already executing");
    running_ = true;
    try {
      ValuePtr v = body_->resume();
      running_ = false;
      if (!v) {
        result_ = body_->returned_value();
        body_ = nullptr;
      }
      return v;
    } catch (UserException& e) {
      // An exception leaving the body finishes the generator; a StopIteration becomes a
      // RuntimeError (PEP 479; 3.12 does it in the body's bytecode already).
      body_ = nullptr;
      running_ = false;
      if (!e.matches(PyExc_StopIteration)) throw;
      pep479_error(e.exception());
    } catch (...) {
      body_ = nullptr;
      running_ = false;
      throw;
    }
  }
  std::optional<ValuePtr> return_value() const override {
    if (body_ || !result_) return std::nullopt;
    return result_;
  }

 private:
  std::shared_ptr<Tracer> body_;
  bool running_ = false;
  ValuePtr result_;  // the body's return value once it returned
};

}  // namespace

std::optional<std::vector<ValuePtr>> remaining_items(const ValuePtr& it) {
  std::vector<ValuePtr> out(it->items.begin() + static_cast<long>(it->pos), it->items.end());
  if (!it->lazy) return out;
  auto rest = it->lazy->remaining();
  if (!rest) return std::nullopt;
  out.insert(out.end(), rest->begin(), rest->end());
  return out;
}

ValuePtr unstarted_container(const ValuePtr& it) {
  if (it->pos < it->items.size() || !it->lazy) return nullptr;
  return it->items.empty() ? it->lazy->unstarted_container() : nullptr;
}

std::optional<LazyIter::Live> live_iterator(const ValuePtr& it) {
  if (it->kind != VKind::Iterator || it->pos < it->items.size() || !it->lazy) return std::nullopt;
  return it->lazy->live();
}

ValuePtr lazy_iterator(std::shared_ptr<LazyIter> src, const std::string& type_name) {
  ValuePtr it = Value::of_kind(VKind::Iterator);
  it->lazy = std::move(src);
  it->method_name = type_name;
  return it;
}

std::shared_ptr<LazyIter> list_iter(ValuePtr list) {
  return std::make_shared<ListIter>(std::move(list));
}
std::shared_ptr<LazyIter> list_reverse_iter(ValuePtr list) {
  return std::make_shared<ListReverseIter>(std::move(list));
}
std::shared_ptr<LazyIter> dict_iter(ValuePtr dict, const std::string& what) {
  return std::make_shared<DictIter>(std::move(dict), what);
}
std::shared_ptr<LazyIter> map_iter(ValuePtr fn, std::vector<ValuePtr> iterators) {
  return std::make_shared<MapIter>(std::move(fn), std::move(iterators));
}
std::shared_ptr<LazyIter> zip_iter(std::vector<ValuePtr> iterators) {
  return std::make_shared<MapIter>(nullptr, std::move(iterators));
}
std::shared_ptr<LazyIter> count_iter(long long start, long long step) {
  return std::make_shared<CountIter>(start, step);
}
std::shared_ptr<LazyIter> chain_iter(ValuePtr outer) {
  return std::make_shared<ChainIter>(std::move(outer));
}
std::shared_ptr<LazyIter> enumerate_iter(ValuePtr iterator, long long start) {
  return std::make_shared<EnumerateIter>(std::move(iterator), start);
}
std::shared_ptr<LazyIter> filter_iter(ValuePtr fn, ValuePtr iterator) {
  return std::make_shared<FilterIter>(std::move(fn), std::move(iterator));
}
std::shared_ptr<LazyIter> generator_iter(std::shared_ptr<Tracer> body) {
  return std::make_shared<GeneratorIter>(std::move(body));
}

}  // namespace tl::capture
