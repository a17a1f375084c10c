#include "frame/c_stack.h"

#include <catch2/catch.hpp>
#include <thread>

namespace {

using namespace tl::frame;

std::uintptr_t here() { return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)); }

struct Seen {
  std::uintptr_t bottom = 0;
  std::uintptr_t frame = 0;
  std::uintptr_t inner_bottom = 0;  // one more switch down, when asked
  int depth_left = 0;
};

void record(void* p) noexcept {
  auto* s = static_cast<Seen*>(p);
  s->bottom = c_stack_bottom();
  s->frame = here();
  if (s->depth_left-- > 0) {
    Seen inner;
    run_on_fresh_stack(record, &inner);
    s->inner_bottom = inner.bottom;
  }
}

}  // namespace

TEST_CASE("c_stack: the thread stack's bottom and floor lie below the current frame") {
  std::uintptr_t bottom = c_stack_bottom();
  REQUIRE(bottom != 0);
  REQUIRE(bottom < here());
  std::uintptr_t floor = c_stack_floor(std::size_t{1} << 20);
  REQUIRE(floor > bottom);
  REQUIRE(floor < here());
}

TEST_CASE("c_stack: run_on_fresh_stack runs on a segment and comes back") {
  std::uintptr_t native = c_stack_bottom();
  std::uint64_t switches = c_stack_switches();
  Seen s;
  REQUIRE(run_on_fresh_stack(record, &s));
  REQUIRE(s.bottom != native);
  REQUIRE(s.frame > s.bottom);
  REQUIRE(s.frame - s.bottom > (std::size_t{32} << 20));  // starts at the segment's top
  REQUIRE(c_stack_bottom() == native);
  REQUIRE(c_stack_switches() == switches + 1);
}

TEST_CASE("c_stack: nested switches use distinct segments, the first is reused") {
  Seen s;
  s.depth_left = 1;
  REQUIRE(run_on_fresh_stack(record, &s));
  REQUIRE(s.inner_bottom != 0);
  REQUIRE(s.inner_bottom != s.bottom);
  // The first segment is kept for reuse, the deeper one is unmapped.
  Seen again;
  REQUIRE(run_on_fresh_stack(record, &again));
  REQUIRE(again.bottom == s.bottom);
}

TEST_CASE("c_stack: a reserve larger than the stack is capped at a quarter of it") {
  std::uintptr_t bottom = 0, floor = 0;
  std::thread t([&] {
    bottom = c_stack_bottom();
    floor = c_stack_floor(std::size_t{64} << 20);  // more than the whole stack
  });
  t.join();
  REQUIRE(bottom != 0);
  REQUIRE(floor > bottom);
  REQUIRE(floor - bottom <= (std::size_t{8} << 20) / 4 + 4096);
}
