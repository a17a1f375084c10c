// Stack segments for the frame hook (see c_stack.h for why). A switch is a
// ucontext swap: two signal-mask system calls, about a microsecond, paid once
// per segment a recursion crosses, never per call.
#include "frame/c_stack.h"

#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TL_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TL_ASAN_FIBERS 1
#endif
#endif
#ifdef TL_ASAN_FIBERS
#include <sanitizer/common_interface_defs.h>
#endif

namespace tl::frame {
namespace {

// NOTE: address space only (MAP_NORESERVE): pages cost memory once touched, as
// on a thread's own stack. 64 MiB holds ~150,000 Python frames on 3.11.
constexpr std::size_t kSegmentBytes = std::size_t{64} << 20;
// An overflow past a segment faults here instead of writing into other memory.
constexpr std::size_t kGuardBytes = std::size_t{64} << 10;

struct Segment {
  char* base;  // lowest mapped address, guard included
  std::uintptr_t bottom() const { return reinterpret_cast<std::uintptr_t>(base) + kGuardBytes; }
};

struct ThreadStacks {
  std::vector<Segment> segments;  // segments[i] serves the i-th nested switch
  std::size_t depth = 0;          // segments in use
  bool native_known = false;
  std::uintptr_t native_bottom = 0;  // 0: unknown
  std::size_t native_size = 0;
  std::uint64_t switches = 0;

  ~ThreadStacks() {
    for (const Segment& s : segments) munmap(s.base, kSegmentBytes);
  }
};
thread_local ThreadStacks t_stacks;

// One switch in progress; lives on the caller's stack. makecontext passes only
// int arguments, so the entry function finds it through t_switch.
struct Switch {
  ucontext_t caller;
  ucontext_t callee;
  void (*fn)(void*);
  void* arg;
  const void* caller_bottom = nullptr;  // the stack to switch back to (ASan)
  std::size_t caller_size = 0;
};
thread_local Switch* t_switch = nullptr;

void find_native_stack(ThreadStacks& t) {
  t.native_known = true;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* addr = nullptr;
  std::size_t size = 0;
  // NOTE: glibc reports the usable range, the guard page excluded (the main
  // thread's from its rlimit and /proc/self/maps).
  if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr && size) {
    t.native_bottom = reinterpret_cast<std::uintptr_t>(addr);
    t.native_size = size;
  }
  pthread_attr_destroy(&attr);
}

extern "C" void segment_entry() {
  Switch* s = t_switch;
#ifdef TL_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(nullptr, &s->caller_bottom, &s->caller_size);
#endif
  s->fn(s->arg);
#ifdef TL_ASAN_FIBERS
  // nullptr: this context is never resumed, so ASan drops its fake stack.
  __sanitizer_start_switch_fiber(nullptr, s->caller_bottom, s->caller_size);
#endif
  setcontext(&s->caller);
}

bool map_segment(ThreadStacks& t) {
  void* p = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) return false;
  if (mprotect(p, kGuardBytes, PROT_NONE) != 0) {
    munmap(p, kSegmentBytes);
    return false;
  }
  t.segments.push_back(Segment{static_cast<char*>(p)});
  return true;
}

}  // namespace

std::uintptr_t c_stack_bottom() {
  ThreadStacks& t = t_stacks;
  if (t.depth > 0) return t.segments[t.depth - 1].bottom();
  if (!t.native_known) find_native_stack(t);
  return t.native_bottom;
}

std::uintptr_t c_stack_floor(std::size_t reserve) {
  ThreadStacks& t = t_stacks;
  std::uintptr_t bottom = c_stack_bottom();
  if (!bottom) return 0;
  std::size_t size = t.depth > 0 ? kSegmentBytes - kGuardBytes : t.native_size;
  // NOTE: a small thread stack (threading.stack_size) still runs most of its
  // depth in place; switching on every call would cost a microsecond each.
  return bottom + std::min(reserve, size / 4);
}

bool run_on_fresh_stack(void (*fn)(void*), void* arg) noexcept {
  ThreadStacks& t = t_stacks;
  if (t.depth == t.segments.size() && !map_segment(t)) return false;
  const Segment& seg = t.segments[t.depth];
  Switch s;
  s.fn = fn;
  s.arg = arg;
  if (getcontext(&s.callee) != 0) return false;
  s.callee.uc_stack.ss_sp = reinterpret_cast<void*>(seg.bottom());
  s.callee.uc_stack.ss_size = kSegmentBytes - kGuardBytes;
  s.callee.uc_link = nullptr;
  makecontext(&s.callee, segment_entry, 0);
  Switch* outer = t_switch;
  t_switch = &s;
  t.depth++;
  t.switches++;
#ifdef TL_ASAN_FIBERS
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, reinterpret_cast<void*>(seg.bottom()),
                                 kSegmentBytes - kGuardBytes);
#endif
  swapcontext(&s.caller, &s.callee);
#ifdef TL_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  t_switch = outer;
  t.depth--;
  if (t.depth == 0) {
    // Back on the thread's own stack: keep one segment for the next deep call.
    for (std::size_t i = 1; i < t.segments.size(); i++) munmap(t.segments[i].base, kSegmentBytes);
    t.segments.resize(std::min<std::size_t>(t.segments.size(), 1));
  }
  return true;
}

std::uint64_t c_stack_switches() { return t_stacks.switches; }

}  // namespace tl::frame
