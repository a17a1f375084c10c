#include "capture/live_iteration.h"

#include "capture/graph_break.h"

namespace tl::capture {

void watch_sources(Value& it, const std::vector<ValuePtr>& sources) {
  for (const ValuePtr& s : sources)
    if (s && (s->kind == VKind::List || s->kind == VKind::Dict))
      it.watched.emplace_back(s, s->items);
}

void watch_iteration_of(Value& it, const ValuePtr& v) {
  watch_sources(it, {v});
  it.flag = v->kind == VKind::List || v->kind == VKind::Dict;
}

bool sources_changed(const Value& it) {
  for (const auto& [s, items] : it.watched) {
    // NOTE: a dict's values may change under an iterator over its keys; only its size may not.
    bool changed = s->kind == VKind::Dict ? s->items.size() != items.size() : s->items != items;
    if (changed) return true;
  }
  return false;
}

void check_sources_unchanged(const Value& it) {
  if (sources_changed(it))
    graph_break("unsupported_value",
                "a list or dict changed while an iterator over it was live (a loop that mutates "
                "the container it walks); CPython's iterator sees the change, so it runs eagerly");
}

}  // namespace tl::capture
