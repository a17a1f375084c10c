#pragma once
// Per-code-object cache of compiled entries, stored in one co_extra slot
// (freed with the code object). Entries are kept most-recently-used first.
// Everything here runs with the GIL held; the GIL is the only lock.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "frame/compiled_frame.h"

namespace tl::frame {

struct ExtraState {
  // shared_ptr: a guard check may run Python code that lets another thread
  // change this list; the entry being checked must outlive that.
  std::vector<std::shared_ptr<CacheEntry>> entries;
  bool skip = false;          // torch's or torchlite's own code: never intercepted
  bool skip_known = false;    // `skip` has been decided
  bool warned_limit = false;  // the cache_size_limit warning was emitted
  // An entry died with an object it matched by identity (GuardSet::
  // id_matched_local_freed): later captures guard the frame's modules by
  // structure instead (capture_frame's `structural_modules`).
  bool fresh_objects = false;
  // Attributes and globals whose int or float changed between calls (GuardSet::
  // changed_numbers, by source): later captures take them per call (capture's
  // DynamicNumbersScope).
  std::unordered_set<std::string> dynamic_numbers;
  // Resume functions and loop bodies: the user's code they continue (borrowed;
  // bytecode/ keeps both alive for the process), else null.
  PyCodeObject* root = nullptr;
  // A user's code, per compile() config id: graph breaks and graphs captured
  // in it and in the resume functions after them (compile_frame.cpp,
  // choose_eager). A non-empty `eager_reason`: the frame runs eagerly from now
  // on, and why.
  struct Chain {
    int breaks = 0;
    int graphs = 0;
    size_t ops = 0;
    std::string eager_reason;
  };
  std::unordered_map<int, Chain> chains;
  // The miss that starts the capture under way failed a tensor's size or rank guard
  // (frame/dynamic_policy.h: a new size even where no graph input shows it).
  bool miss_on_size = false;
  uint64_t epoch = 0;    // entries of an older epoch are dropped on next use
  uint64_t version = 0;  // bumped on every change to `entries`
};

// The code object's state, or nullptr if it has none (borrows `code`).
ExtraState* find_extra(PyCodeObject* code);
// The code object's state, created empty if needed and refreshed to the
// current epoch. Throws PythonError if co_extra cannot be set.
ExtraState* get_extra(PyCodeObject* code);
// Drops all entries and skip decisions (torchlite.reset()): at once for every
// code object with a state, so compiled code is freed now.
void bump_epoch();
uint64_t current_epoch();

// Number of entries of the current epoch (borrows `code`).
int cache_entry_count(PyCodeObject* code);
// Inserts at the front.
void insert_entry(ExtraState& st, std::shared_ptr<CacheEntry> entry);
// Drops the entries that matched an object by identity which is gone since (they can never
// match again); true if there were any. Sets `fresh_objects` then.
bool drop_dead_entries(ExtraState& st);
// Moves `entry` to the front if it is still in the list.
void move_to_front(ExtraState& st, const CacheEntry* entry);
int count_entries(const ExtraState& st, int config_id);
// Entries of `config_id` whose ID-matched locals (guards::GuardSet::
// id_matched_locals) are the objects in `frame`: the ones that count toward
// cache_size_limit (as Dynamo counts per ID-matched object set).
int count_entries_for_objects(const ExtraState& st, int config_id, const ir::FrameView& frame);

}  // namespace tl::frame
