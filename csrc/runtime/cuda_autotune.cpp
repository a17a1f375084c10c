#include "runtime/cuda_autotune.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/counters.h"
#include "core/errors.h"
#include "core/py_import.h"
#include "core/sha256.h"
#include "runtime/disk_cache.h"

namespace tl::runtime {
namespace {

PyRef check(PyObject* r) {
  if (!r) throw PythonError();
  return PyRef::steal(r);
}

// Launches per timing and timings per candidate: the best of kRepeats, each the mean of
// kLaunches back-to-back launches (one launch alone is mostly its launch latency).
constexpr int kLaunches = 10, kRepeats = 3;
// A candidate replaces the code generator's grid only when at least this much faster.
constexpr double kMinGain = 0.97;

// Microseconds a launch at `grid` takes, best of kRepeats.
double time_launches(unsigned grid, const std::function<void(unsigned)>& launch) {
  PyRef event_type = import_attr("torch.cuda", "Event");
  PyRef kw = check(Py_BuildValue("{s:O}", "enable_timing", Py_True));
  PyRef no_args = check(PyTuple_New(0));
  PyRef start = check(PyObject_Call(event_type.get(), no_args.get(), kw.get()));
  PyRef end = check(PyObject_Call(event_type.get(), no_args.get(), kw.get()));
  launch(grid);  // warm-up
  double best = 1e30;
  for (int r = 0; r < kRepeats; ++r) {
    check(PyObject_CallMethod(start.get(), "record", nullptr));
    for (int i = 0; i < kLaunches; ++i) launch(grid);
    check(PyObject_CallMethod(end.get(), "record", nullptr));
    check(PyObject_CallMethod(end.get(), "synchronize", nullptr));
    PyRef ms = check(PyObject_CallMethod(start.get(), "elapsed_time", "O", end.get()));
    double us = PyFloat_AsDouble(ms.get()) * 1e3 / kLaunches;
    if (PyErr_Occurred()) throw PythonError();
    best = std::min(best, us);
  }
  return best;
}

std::vector<unsigned> candidates(unsigned grid, unsigned max_grid) {
  std::vector<unsigned> out = {grid};
  for (unsigned g : {grid / 8, grid / 4, grid / 2, grid * 2, grid * 4}) {
    g = std::clamp(g, 1u, std::max(grid, max_grid));
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  }
  return out;
}

}  // namespace

std::function<double(unsigned)> launch_timer(std::function<void(unsigned)> launch) {
  return [launch = std::move(launch)](unsigned grid) { return time_launches(grid, launch); };
}

GridChoice choose_grid(const std::string& key, const std::string& gpu, unsigned default_grid,
                       unsigned max_grid, const std::function<double(unsigned)>& time_us) {
  GridChoice c;
  DiskCache cache = DiskCache::configured();
  const std::string entry =
      sha256_hex("grid\n" + key + "\n" + std::to_string(default_grid) + "\n" + gpu);
  if (auto text = cache.load(EntryKind::TuneChoice, entry)) {
    char* end = nullptr;
    long g = std::strtol(text->c_str(), &end, 10);
    if (end && *end == '\0' && g > 0 && g <= static_cast<long>(std::max(default_grid, max_grid))) {
      c.grid = static_cast<unsigned>(g);
      c.cached = true;
      c.report = "grid " + *text + " (disk cache)";
      counters().autotune_cached++;
      return c;
    }
  }
  std::ostringstream report;
  double base = 0, best = 0;
  c.grid = default_grid;
  for (unsigned g : candidates(default_grid, max_grid)) {
    double us = time_us(g);
    counters().autotune_trials++;
    report << "grid " << g << ": " << us << " us; ";
    if (g == default_grid) {
      base = best = us;
    } else if (us < best && us < base * kMinGain) {
      best = us;
      c.grid = g;
    }
  }
  report << "-> grid " << c.grid;
  c.report = report.str();
  cache.store(EntryKind::TuneChoice, entry, std::to_string(c.grid));
  return c;
}

}  // namespace tl::runtime
