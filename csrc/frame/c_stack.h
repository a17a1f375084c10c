#pragma once
// The C stack under the frame hook. CPython evaluates a Python-to-Python call
// inside the same C frame only while no PEP 523 hook is installed; with ours
// installed (for the whole interpreter, while any thread is in a compiled
// region) every Python call nests _PyEval_EvalFrameDefault on the C stack,
// about 400 bytes a frame on 3.11. A recursion eager runs in constant C stack
// (20,000 deep with a raised recursion limit) would overflow the thread's 8 MiB.
// So the hook checks the stack left and, when it runs low, continues on a fresh
// segment: deep recursion returns as eager does, and RecursionError comes from
// the Python limit, as in eager. Rejected: raising RecursionError when the
// stack runs low (eager returns there), and a stack-size limit on threads (it
// cannot reach the main thread or threads started before torchlite).
#include <cstddef>
#include <cstdint>

namespace tl::frame {

// The lowest usable address of the C stack this code runs on (the thread's own
// stack or a segment from run_on_fresh_stack), or 0 when it is unknown.
std::uintptr_t c_stack_bottom();

// The address the hook's reserve check compares its frame address with: below
// it, less than `reserve` bytes (a quarter of a small thread stack at most)
// are left. 0 (never low) when the stack is unknown.
std::uintptr_t c_stack_floor(std::size_t reserve);

// Runs fn(arg) on a fresh stack segment of this thread and returns once it has
// returned. fn must not throw (nothing can unwind across the switch). Returns
// false, without running fn, when no segment could be mapped. Segments are
// kept per thread for reuse and unmapped at thread exit. Needs no GIL.
bool run_on_fresh_stack(void (*fn)(void*), void* arg) noexcept;

// Test support: segments this thread has switched to, since it started.
std::uint64_t c_stack_switches();

}  // namespace tl::frame
