#pragma once
// Iterators that produce their items when asked, as CPython's do: a map calls its function,
// a generator runs its body up to the next yield, a list iterator reads the list as it is
// now. Materialising them when they are made would run user code too early (a map whose
// function mutates a nonlocal read by the loop body) or read stale state (a generator that
// reads the list being extended with it).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capture/value.h"

namespace tl::capture {

class Tracer;

class LazyIter {
 public:
  virtual ~LazyIter() = default;
  // The next item, or null once exhausted; may run traced code through `t`.
  virtual ValuePtr next(Tracer& t) = 0;
  // The items still to come when they can be read without running code (a list, a dict, an
  // enumerate or zip of those), for a loop handed to CPython at a graph break; else nullopt.
  virtual std::optional<std::vector<ValuePtr>> remaining() const { return std::nullopt; }
  // The list or dict this iterator is a fresh iter() of (nothing read from it yet), else
  // null: a loop handed to CPython at a graph break then walks the container itself and sees
  // what the loop body does to it, as eager's loop does.
  virtual ValuePtr unstarted_container() const { return nullptr; }
  // How CPython makes this iterator again over the same list or dict, so that a loop handed
  // over at a graph break sees what its body then does to it, as eager's does (a snapshot of
  // remaining() would not): iter(factory(*args)) (factory null: iter(args[0])) advanced past
  // `skip` items, an argument that is an Iterator value made the same way. nullopt where no
  // list or dict is under it (the snapshot is then exact). NOTE: a list the trace built is
  // rebuilt once, so one the frame also holds elsewhere is a clean break (ResidualBuilder).
  struct Live {
    PyRef factory;
    std::vector<ValuePtr> args;
    long long skip = 0;
  };
  virtual std::optional<Live> live() const { return std::nullopt; }
  // What the source returned when it was exhausted (the value of `yield from` over it): a
  // generator's return value; nullopt where it is not known (a user iterator's StopIteration).
  virtual std::optional<ValuePtr> return_value() const { return std::nullopt; }
};

// An object whose class defines __next__ in Python.
namespace detail {
bool is_user_iterator(const ValuePtr& v);
}

// items[pos..] and then the lazy source's remaining(); nullopt when that needs code to run.
std::optional<std::vector<ValuePtr>> remaining_items(const ValuePtr& iterator);
// The container `iterator` is a fresh iter() of (LazyIter::unstarted_container), or null.
ValuePtr unstarted_container(const ValuePtr& iterator);
// LazyIter::live of an Iterator value with no items read ahead, else nullopt.
std::optional<LazyIter::Live> live_iterator(const ValuePtr& iterator);

// An Iterator value over `src`; `type_name` is the Python type it stands for ("map").
ValuePtr lazy_iterator(std::shared_ptr<LazyIter> src, const std::string& type_name);

std::shared_ptr<LazyIter> list_iter(ValuePtr list);
std::shared_ptr<LazyIter> list_reverse_iter(ValuePtr list);
// Over a Dict value's keys, values or items (`what`), raising CPython's RuntimeError when the
// dict changes size while iterated.
std::shared_ptr<LazyIter> dict_iter(ValuePtr dict, const std::string& what);
std::shared_ptr<LazyIter> map_iter(ValuePtr fn, std::vector<ValuePtr> iterators);
std::shared_ptr<LazyIter> zip_iter(std::vector<ValuePtr> iterators);
// itertools.chain over the iterables an Iterator value `outer` gives.
std::shared_ptr<LazyIter> chain_iter(ValuePtr outer);
// itertools.count(start, step) of ints.
std::shared_ptr<LazyIter> count_iter(long long start, long long step);
std::shared_ptr<LazyIter> enumerate_iter(ValuePtr iterator, long long start);
// filter(fn, it); `fn` null for filter(None, it).
std::shared_ptr<LazyIter> filter_iter(ValuePtr fn, ValuePtr iterator);
// A generator's body, run by its own tracer (Tracer::resume) one yield at a time.
std::shared_ptr<LazyIter> generator_iter(std::shared_ptr<Tracer> body);

}  // namespace tl::capture
