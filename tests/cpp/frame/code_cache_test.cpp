#include "frame/code_cache.h"

#include <catch2/catch.hpp>

#include "frame/frame_access.h"

namespace {

using tl::PyRef;
using namespace tl::frame;

// A fresh code object nobody else references.
PyRef fresh_code() {
  return PyRef::steal(Py_CompileString("x + 1", "<cache_test>", Py_eval_input));
}

std::shared_ptr<const CompileConfig> make_config(int id) {
  auto c = std::make_shared<CompileConfig>();
  c->id = id;
  return c;
}

// Sets *destroyed when the entry holding it dies.
class TrackedFrame : public CompiledFrame {
 public:
  explicit TrackedFrame(bool* destroyed) : destroyed_(destroyed) {}
  ~TrackedFrame() override { *destroyed_ = true; }
  PyObject* run(const tl::ir::FrameView&, tl::frame::Served*) override { return nullptr; }

 private:
  bool* destroyed_;
};

std::shared_ptr<CacheEntry> entry(int config_id, bool* destroyed = nullptr) {
  auto e = std::make_shared<CacheEntry>();
  e->config = make_config(config_id);
  if (destroyed) e->compiled = std::make_shared<TrackedFrame>(destroyed);
  return e;
}

}  // namespace

TEST_CASE("code_cache: entries are kept most-recently-used first") {
  PyRef code = fresh_code();
  auto* c = reinterpret_cast<PyCodeObject*>(code.get());
  REQUIRE(find_extra(c) == nullptr);
  ExtraState* st = get_extra(c);
  auto a = entry(1), b = entry(1), other = entry(2);
  insert_entry(*st, a);
  insert_entry(*st, b);
  insert_entry(*st, other);
  CHECK(st->entries.front() == other);
  CHECK(count_entries(*st, 1) == 2);
  CHECK(cache_entry_count(c) == 3);
  move_to_front(*st, a.get());
  CHECK(st->entries[0] == a);
  CHECK(st->entries[1] == other);
  CHECK(st->entries[2] == b);
}

TEST_CASE("code_cache: bump_epoch drops entries at once (their code is freed) and skip decisions") {
  PyRef code = fresh_code();
  auto* c = reinterpret_cast<PyCodeObject*>(code.get());
  bool destroyed = false;
  ExtraState* st = get_extra(c);
  insert_entry(*st, entry(1, &destroyed));
  st->skip = st->skip_known = true;
  bump_epoch();
  CHECK(cache_entry_count(c) == 0);
  CHECK(destroyed);  // not only when the code runs next: torchlite.reset() frees JIT code
  st = get_extra(c);
  CHECK(st->entries.empty());
  CHECK_FALSE(st->skip_known);
}

TEST_CASE("code_cache: entries die with their code object") {
  bool destroyed = false;
  {
    PyRef code = fresh_code();
    insert_entry(*get_extra(reinterpret_cast<PyCodeObject*>(code.get())), entry(1, &destroyed));
    CHECK_FALSE(destroyed);
  }
  CHECK(destroyed);
}
