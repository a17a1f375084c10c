// co_exceptiontable: each entry is (start, length, target, depth<<1 | lasti)
// in code units, varints of 6-bit groups, most significant first, 0x40 = more
// follows, 0x80 marks an entry's first byte (InternalDocs/exception_handling.md).
// Entries are sorted and disjoint, so nested blocks are flattened first.
#include <algorithm>
#include <cstdint>
#include <numeric>

#include "bytecode/assembler.h"
#include "core/errors.h"

namespace tl::bytecode {

namespace {

bool partially_overlap(const IndexBlock& a, const IndexBlock& b) {
  bool disjoint = a.last < b.first || b.last < a.first;
  bool a_in_b = b.first <= a.first && a.last <= b.last;
  bool b_in_a = a.first <= b.first && b.last <= a.last;
  return !disjoint && !a_in_b && !b_in_a;
}

void write_varint(std::string& out, uint32_t v, unsigned char mark) {
  int shift = 0;
  while (shift < 30 && (v >> (shift + 6)) != 0) shift += 6;
  for (; shift > 0; shift -= 6) {
    out.push_back(static_cast<char>(((v >> shift) & 63) | 64 | mark));
    mark = 0;
  }
  out.push_back(static_cast<char>((v & 63) | mark));
}

// Instructions sharing a handler, depth and lasti: one table entry.
struct Run {
  int first, last, block;
};

bool same_handler(const IndexBlock& a, const IndexBlock& b) {
  return a.handler == b.handler && a.depth == b.depth && a.lasti == b.lasti;
}

std::vector<Run> runs(const std::vector<IndexBlock>& blocks, const std::vector<int>& cover) {
  std::vector<Run> out;
  for (int i = 0; i < static_cast<int>(cover.size()); ++i) {
    int b = cover[i];
    if (b < 0) continue;
    // NOTE: CPython merges neighbours with the same handler, so distinct
    // blocks with one handler give one entry, as in the compiler's output.
    if (!out.empty() && out.back().last == i - 1 &&
        same_handler(blocks[out.back().block], blocks[b])) {
      out.back().last = i;
    } else {
      out.push_back({i, i, b});
    }
  }
  return out;
}

}  // namespace

std::vector<int> innermost_blocks(const std::vector<IndexBlock>& blocks, size_t n_insts) {
  const int n = static_cast<int>(n_insts);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const IndexBlock& b = blocks[i];
    TL_CHECK(0 <= b.first && b.first <= b.last && b.last < n && 0 <= b.handler && b.handler < n)
        << "exception block " << i << " [" << b.first << ", " << b.last << "] -> " << b.handler
        << " is out of range for " << n << " instructions";
    TL_CHECK(b.depth >= 0) << "exception block " << i << " has depth " << b.depth;
    for (size_t j = 0; j < i; ++j) {
      TL_CHECK(!partially_overlap(b, blocks[j]))
          << "exception blocks " << j << " and " << i << " overlap without nesting";
    }
  }
  // Outer blocks first (earlier start, then longer), so inner ones overwrite.
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const IndexBlock &x = blocks[a], &y = blocks[b];
    return x.first != y.first ? x.first < y.first : x.last > y.last;
  });
  std::vector<int> cover(n_insts, -1);
  for (size_t k : order)
    for (int i = blocks[k].first; i <= blocks[k].last; ++i) cover[i] = static_cast<int>(k);
  return cover;
}

std::string encode_exception_table(const std::vector<IndexBlock>& blocks, const Layout& layout) {
  std::vector<int> cover = innermost_blocks(blocks, layout.offsets.size());
  std::string out;
  for (const Run& r : runs(blocks, cover)) {
    const IndexBlock& b = blocks[r.block];
    int start = layout.offsets[r.first] / 2;
    int end = layout.offsets[r.last] / 2 + layout.units[r.last];
    write_varint(out, start, 0x80);
    write_varint(out, end - start, 0);
    write_varint(out, layout.offsets[b.handler] / 2, 0);
    write_varint(out, (static_cast<uint32_t>(b.depth) << 1) | (b.lasti ? 1 : 0), 0);
  }
  return out;
}

}  // namespace tl::bytecode
