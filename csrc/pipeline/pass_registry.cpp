#include "pipeline/pass_registry.h"

#include <algorithm>
#include <mutex>

#include "core/errors.h"

namespace tl::pipeline {
namespace {

std::mutex g_mu;  // frames may be compiled on any thread

std::vector<Pass>& registry() {
  static std::vector<Pass> passes = builtin_passes();
  return passes;
}

auto find(std::vector<Pass>& passes, const std::string& name) {
  return std::find_if(passes.begin(), passes.end(), [&](const Pass& p) { return p.name == name; });
}

}  // namespace

std::vector<Pass> registered_passes() {
  std::lock_guard<std::mutex> lock(g_mu);
  return registry();  // NOTE: a copy, so a pass registered meanwhile never moves one running
}

void register_pass(Pass pass, const std::string& before) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<Pass>& passes = registry();
  if (find(passes, pass.name) != passes.end())
    TL_THROW(Value) << "register_pass: a pass named '" << pass.name << "' is already registered";
  passes.insert(before.empty() ? passes.end() : find(passes, before), std::move(pass));
}

bool unregister_pass(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<Pass>& passes = registry();
  auto it = find(passes, name);
  if (it == passes.end()) return false;
  passes.erase(it);
  return true;
}

}  // namespace tl::pipeline
