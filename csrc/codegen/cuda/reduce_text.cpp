// Reduction kernels: each outer point (a row) is reduced by one thread, one
// warp or one block, chosen by row length and memory layout; reductions run in
// passes over the row as the CPU emitter's (softmax: max, then the sum of
// exp(x - max), then the per-element outputs). When a warp's or block's row
// fits in registers, the values that several passes need (inputs, exp, chains
// of cheap ops) are kept in per-thread arrays (fully unrolled loops,
// compile-time bound) and the later passes read them from there; longer rows
// re-read their inputs every pass. The vector entry of a 16-bit kernel takes
// two elements a step (pair_text.cpp).
#include <algorithm>

#include "codegen/common/reduce_schedule.h"
#include "codegen/cuda/emitter.h"
#include "core/errors.h"

namespace tl::codegen::cuda {

using ir::ExprOp;

namespace {
// Per-thread register budget of the row cache (plan_row_cache): values per
// cached input, and bytes over all cached inputs (past it, spills to local
// memory would cost more than re-reading the row through L2).
constexpr int64_t kCacheValues = 32, kCacheBytes = 128;

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}
// __shfl_xor_sync has overloads for 32/64-bit ints and floats only.
const char* shuffle_type(ST t) {
  if (is_float_type(t)) return reg_type(t);
  return t == ST::I64 ? "long long" : "int";
}
}  // namespace

// The layout comes from the cost model (codegen/common/reduce_schedule.h):
// lanes along a row (a warp per row up to 1024 elements; a block for longer
// rows, or when too few rows fill the GPU with warps), or across rows (a thread
// per row, or a Tile of 8-32 rows split between lane groups when rows are few).
Writer::Rows Writer::choose_rows() const {
  int64_t rows = product(s_.outer), len = product(s_.red);
  ReduceSchedule r = tile_schedule();
  if (r.layout == RowLayout::Across) return r.slices > 1 ? Rows::Tile : Rows::Thread;
  if (len > 1024 || (rows < int64_t{target_.multiprocessors} * 4 && len > 256)) return Rows::Block;
  return Rows::Warp;
}

ReduceSchedule Writer::tile_schedule() const {
  std::vector<int> bytes;
  for (size_t b = 0; b < n_memory(); ++b) bytes.push_back(elem_bytes(buffer_type(b)));
  return choose_reduce_schedule(s_, bytes, k_.inputs.size(), tile_target());
}

ReduceTarget Writer::tile_target() const {
  // NOTE: every thread an SM holds: a memory-bound reduction needs them all in flight.
  ReduceTarget t;
  t.full_lanes = double(target_.multiprocessors) * 2048;
  // A tile keeps a value a thread of every reduction in shared memory: past 32 KiB
  // (many or 64-bit reductions) fewer lanes a tile leave room for two blocks an SM.
  int per_thread = 0;
  for (const ir::Expr& e : k_.exprs)
    if (is_reduce(e.op))
      per_thread += is_arg_reduce(e.op) ? 8 + elem_bytes(type(e.operands[0])) : elem_bytes(e.type);
  while (t.max_lanes > 64 && t.max_lanes * per_thread > 32 * 1024) t.max_lanes /= 2;
  return t;
}

// Elements per pack of the vectorised entry: 16 bytes of the widest buffer
// contiguous along the (single, coalesced) reduction axis of a warp's or
// block's row. Those buffers are read and written in packs, so each row's
// start must stay pack-aligned and the row must be whole packs.
bool Writer::reduce_vector_width(int* width) const {
  Rows rows = choose_rows();
  if (rows == Rows::Thread || rows == Rows::Tile || s_.red.size() != 1 || gathers_ > 0)
    return false;
  int v = pack_width(s_.outer.size());
  if (v == 0 || s_.red[0] % v != 0) return false;
  *width = v;
  return true;
}

bool Writer::packed(size_t buf) const { return vec_ > 0 && s_.strides[buf][s_.outer.size()] == 1; }

std::string Writer::pack(size_t buf) const {
  return std::string("tl_pack<") + mem_type(buffer_type(buf)) + ", " + std::to_string(vec_) + ">";
}

void Writer::reduction_kernel(const std::string& entry) {
  Rows rows = choose_rows();
  int64_t n_rows = product(s_.outer), len = product(s_.red);
  // NOTE: block rows of 2049-4096 elements get 128 threads (17-32 values a thread, in
  // the row cache when it has room), others 256 up to 8192, then 512 and 1024. Measured on an H100
  // for layer_norm(softmax(x) + x) over 8192x4096 bf16, which is compute-bound (76% with 256
  // threads): 63 us at 128 threads, 72 at 256, 92 at 512. (Before rows were vectorised and cached:
  // 0.097 ms at 256, 0.106 at 128, 0.129 at 512, 0.228 at 1024.)
  if (rows == Rows::Tile) {
    ReduceSchedule ts = tile_schedule();
    slices_ = ts.slices, tile_rows_ = ts.tile_rows;
  }
  // NOTE: a warp row takes a lane per element (per 16-byte pack in the vector
  // entry); a row shorter than the warp gets the fewest lanes (a power of two)
  // that still give each one step, and the warp takes several rows: a layer
  // norm over 40 channels in packs of 8 used 5 lanes of 32 and five shuffle
  // rounds a reduction, now 5 of 8 and three rounds, four rows a warp.
  row_lanes_ = 32;
  if (rows == Rows::Warp) {
    int64_t steps = vec_ > 0 ? (len + vec_ - 1) / vec_ : len;
    while (row_lanes_ > 4 && row_lanes_ / 2 >= steps) row_lanes_ /= 2;
  }
  const int group_rows = 32 / row_lanes_;  // rows a warp holds
  // Rows past the end in a warp's last group: its lanes still take part in the
  // shuffles, but read and write nothing. NOTE: with runtime sizes the guard is always
  // there, so the text (one compile) serves row counts that are multiples and others.
  row_guard_ = group_rows > 1 && (k_.runtime_sizes || n_rows % group_rows != 0);
  const int own = rows == Rows::Tile                        ? tile_rows_ * slices_
                  : rows != Rows::Block                     ? 256
                  : len > 16384                             ? 1024
                  : len > 8192                              ? 512
                  : len > 2048 && len <= 128 * kCacheValues ? 128
                                                            : 256;
  block_ = own;
  // Max-autotune's other builds (Target::reduce_block): half and twice the code generator's
  // block, 128 to 1024 threads. Every row strategy but tiles loops over its rows (and a block
  // row over its elements) by the block size, so any of them computes the same result.
  out_.other_blocks.clear();
  if (rows != Rows::Tile) {
    for (int b : {own / 2, own * 2})
      if (b >= 128 && b <= 1024) out_.other_blocks.push_back(b);
    const int r = target_.reduce_block;
    if (r > 0 && r % 32 == 0 && r <= 1024) block_ = r;
  } else {
    // A tile's other builds split each row between half or twice the slices (the cost
    // model's split factor), over the same tile rows, so the grid (a block a tile) stays:
    // slices stay a power of two (the combine is a tree), at least 2 (one slice is a thread
    // row, another text), each with 4 points or more, and within the tile's lanes.
    const int most = tile_target().max_lanes;
    for (int s : {slices_ / 2, slices_ * 2})
      if (s >= 2 && tile_rows_ * s <= most && int64_t{s} * 4 <= len)
        out_.other_blocks.push_back(tile_rows_ * s);
    const int r = target_.reduce_block;
    if (std::find(out_.other_blocks.begin(), out_.other_blocks.end(), r) !=
        out_.other_blocks.end()) {
      slices_ = r / tile_rows_;
      block_ = r;
    }
  }
  std::string b = std::to_string(block_), nr = num("rows", n_rows);
  open_kernel(entry, block_);
  if (rows == Rows::Block || rows == Rows::Tile) {
    // Block rows: a value a warp; tiles: a value a thread (slice x row).
    std::string n = rows == Rows::Block ? "32" : b;
    for (size_t i = 0; i < k_.exprs.size(); ++i) {
      const ir::Expr& e = k_.exprs[i];
      if (!is_reduce(e.op)) continue;
      ST t = is_arg_reduce(e.op) ? type(e.operands[0]) : e.type;
      line("__shared__ " + std::string(reg_type(t)) + " sh" + std::to_string(i) + "[" + n + "];");
      if (is_arg_reduce(e.op))
        line("__shared__ long long shi" + std::to_string(i) + "[" + n + "];");
    }
  }
  plan_staged_outputs(rows);
  for (size_t o = 0; o < staged_.size(); ++o)
    if (staged_[o])
      line("__shared__ " + std::string(mem_type(buffer_type(n_in_ + o))) + " st" +
           std::to_string(o) + "[" + std::to_string(stage_pitch_ * product(s_.red)) + "];");
  std::string tid = "(" + idx_ + ")blockIdx.x * " + b + " + threadIdx.x";
  std::string all = "(" + idx_ + ")gridDim.x * " + b;
  switch (rows) {
    case Rows::Thread:
      open("for (" + idx_ + " row = " + tid + "; row < " + nr + "; row += " + all + ")");
      out_.grid = grid_for(n_rows, block_);
      break;
    case Rows::Warp:
      line("const unsigned lane = threadIdx.x & " + std::to_string(row_lanes_ - 1) + ";");
      if (group_rows == 1) {
        open("for (" + idx_ + " row = (" + tid + ") >> 5; row < " + nr + "; row += (" + all +
             ") >> 5)");
      } else {
        // NOTE: the loop runs per warp (its first row), so a warp's lanes stay
        // converged for the full-mask shuffles.
        std::string g = std::to_string(group_rows);
        open("for (" + idx_ + " row0 = ((" + tid + ") >> 5) * " + g + "; row0 < " + nr +
             "; row0 += ((" + all + ") >> 5) * " + g + ")");
        line("const " + idx_ + " row = row0 + (threadIdx.x & 31) / " + std::to_string(row_lanes_) +
             ";");
      }
      out_.grid = grid_for((n_rows + group_rows - 1) / group_rows * 32, block_);
      break;
    case Rows::Block:
      open("for (" + idx_ + " row = blockIdx.x; row < " + nr + "; row += gridDim.x)");
      out_.grid = std::clamp<int64_t>(n_rows, 1, (int64_t{1} << 31) - 1);
      break;
    case Rows::Tile: {
      // NOTE: every thread of a tile runs the loop (rows past the end too): the
      // slices combine through shared memory behind block barriers.
      int64_t tiles = (n_rows + tile_rows_ - 1) / tile_rows_;
      std::string tr = std::to_string(tile_rows_);
      line("const unsigned lane = threadIdx.x % " + tr + ", slice = threadIdx.x / " + tr + ";");
      open("for (" + idx_ + " tile = blockIdx.x; tile < " + num("tiles", tiles) +
           "; tile += gridDim.x)");
      line("const " + idx_ + " row = tile * " + tr + " + lane;");
      out_.grid = std::clamp<int64_t>(tiles, 1, (int64_t{1} << 31) - 1);
      break;
    }
  }
  (void)len;
  offsets("b", "row", s_.outer, 0, "");
  done_.assign(k_.exprs.size(), 0);
  acc_.assign(k_.exprs.size(), std::string());
  plan_row_cache(rows);
  pair_mode_ = vec_ > 0 && any_pair_op();
  for (int b = 0; b < n_in_; ++b)  // the vector entry's input packs
    if (packed(b)) line(pack(b) + " pk" + std::to_string(b) + ";");
  for (size_t i = 0; i < k_.exprs.size(); ++i)
    if (cache_first_[i])
      line(std::string(reg_type(type(static_cast<int>(i)))) + " rc" + std::to_string(i) + "[" +
           std::to_string(cache_n_) + "];");
  for (int p = 1; p <= plan_.n_passes; ++p) reduce_pass(p, rows);
  // Values per row: written once, at the row's first reduction point.
  new_scope([](int buf) { return "in" + std::to_string(buf) + "[b" + std::to_string(buf) + "]"; },
            "row", "0", "b");
  bool any = false;
  for (int p : plan_.out_pass) any |= p == 0;
  if (any) {
    if (rows != Rows::Thread)
      open(rows == Rows::Warp
               ? (row_guard_ ? "if (lane == 0 && row < " + nr + ")" : "if (lane == 0)")
           : rows == Rows::Tile ? "if (row < " + nr + " && slice == 0)"
                                : "if (threadIdx.x == 0)");
    store_outputs(0, [&](size_t o, const std::string& v, const std::string&) {
      line("out" + std::to_string(o) + "[b" + std::to_string(n_in_ + o) + "] = " + v + ";");
    });
    if (rows != Rows::Thread) close();
  }
  close();
  close();
  pair_mode_ = false;
}

void Writer::reduce_pass(int p, Rows rows) {
  std::vector<int> mine;
  for (size_t i = 0; i < k_.exprs.size(); ++i)
    if (is_reduce(k_.exprs[i].op) && plan_.pass[i] == p) mine.push_back(static_cast<int>(i));
  for (int i : mine) {
    const ir::Expr& e = k_.exprs[i];
    bool arg = is_arg_reduce(e.op);
    ST t = arg ? type(e.operands[0]) : e.type;
    acc_[i] = fresh("a");
    line(std::string(reg_type(t)) + " " + acc_[i] + " = " + reduce_identity(e.op, t) + ";");
    if (arg) line("long long " + acc_[i] + "i = 0;");
  }
  std::string len = static_row_ ? std::to_string(product(s_.red)) : num("len", product(s_.red));
  int64_t threads = rows == Rows::Warp ? row_lanes_ : rows == Rows::Block ? block_ : 1;
  std::string first = rows == Rows::Warp ? "lane" : "threadIdx.x", V = std::to_string(vec_);
  bool guard = false;  // the unrolled loop's last step may pass the row's end
  int loops = 1;
  if (rows == Rows::Warp && row_guard_) {  // a warp's rows past the end (reduction_kernel)
    open("if (row < " + num("rows", product(s_.outer)) + ")");
    ++loops;
  }
  // The vector entry's output packs: stored at a pack's last element. 16-bit
  // float outputs keep the pack's float32 values and convert them in pairs.
  auto in_pairs = [&](size_t buf) { return packed(buf) && ir::is_half(buffer_type(buf)); };
  for (size_t o = 0; o < k_.outputs.size(); ++o) {
    if (plan_.out_pass[o] != p || !packed(n_in_ + o)) continue;
    if (word_output(o))  // pair evaluation's words, as computed
      line(word_pack(vec_) + " sw" + std::to_string(o) + ";");
    else
      line((in_pairs(n_in_ + o) ? "float" : pack(n_in_ + o)) + " so" + std::to_string(o) +
           (in_pairs(n_in_ + o) ? "[" + std::to_string(vec_) + "]" : "") + ";");
  }
  // Pair evaluation (pair_text.cpp) takes two neighbouring elements, of one pack, a step.
  const int n_elem = pair_mode_ ? 2 : 1;
  const std::string step = pair_mode_ ? "j += 2" : "++j";
  if (cache_n_ > 0) {
    line("#pragma unroll");
    open("for (int j = 0; j < " + std::to_string(cache_n_) + "; " + step + ")");
    // NOTE: the vector entry gives each thread vec_ neighbouring elements per
    // step (one 16-byte pack), the scalar entry one element per step.
    if (vec_)
      line("const " + idx_ + " r = (" + first + " + (" + idx_ + ")(j / " + V + ") * " +
           std::to_string(threads) + ") * " + V + " + j % " + V + ";");
    else
      line("const " + idx_ + " r = " + first + " + (" + idx_ + ")j * " + std::to_string(threads) +
           ";");
    guard =
        (k_.runtime_sizes && !static_row_) || product(s_.red) % (threads * std::max(vec_, 1)) != 0;
    if (guard) open("if (r < " + len + ")");
  } else if (vec_) {
    open("for (" + idx_ + " r0 = " + first + " * " + V + "; r0 < " + len +
         "; r0 += " + std::to_string(threads * vec_) + ")");
    line("#pragma unroll");
    open("for (int j = 0; j < " + V + "; " + step + ")");
    line("const " + idx_ + " r = r0 + j;");
    loops += 1;
  } else {
    switch (rows) {
      case Rows::Thread:
        open("for (" + idx_ + " r = 0; r < " + len + "; ++r)");
        break;
      case Rows::Warp:
        open("for (" + idx_ + " r = lane; r < " + len + "; r += " + std::to_string(row_lanes_) +
             ")");
        break;
      case Rows::Block:
        open("for (" + idx_ + " r = threadIdx.x; r < " + len + "; r += " + std::to_string(block_) +
             ")");
        break;
      case Rows::Tile:
        open("if (row < " + num("rows", product(s_.outer)) + ")");
        line("#pragma unroll 4");  // independent loads in flight: the row is strided
        open("for (" + idx_ + " r = slice; r < " + len + "; r += " + std::to_string(slices_) + ")");
        loops += 1;
        break;
    }
  }
  offsets("o", "r", s_.red, s_.outer.size(), "b");
  if (pair_mode_) offsets("oo", "(r + 1)", s_.red, s_.outer.size(), "b");
  // Element e of the step: its index within the thread's values, and its offsets' prefix.
  auto J = [](int e) { return std::string(e ? "(j + 1)" : "j"); };
  auto O = [](int e) { return std::string(e ? "oo" : "o"); };
  // An input pack is loaded (at the pack's first element) where the pass first reads it.
  std::vector<char> loaded(n_in_);
  auto ref = [&, V](int el) -> ElemRef {
    return [&, V, el](int buf) {
      std::string bs = std::to_string(buf);
      if (!packed(buf)) return "in" + bs + "[" + O(el) + bs + "]";
      if (!loaded[buf])
        line("if (j % " + V + " == 0) pk" + bs + " = *reinterpret_cast<const " + pack(buf) +
             "*>(in" + bs + " + o" + bs + ");");
      loaded[buf] = 1;
      return "pk" + bs + ".e[" + J(el) + " % " + V + "]";
    };
  };
  if (pair_mode_)
    new_pair_scope(ref, "row", "r", "(r + 1)");
  else
    new_scope(ref(0), "row", "r");
  // Cached values of earlier passes are read back; those this pass is the
  // first to need are computed here (lowest expr first: one may use another).
  // (Every element's names first: a pair computes both elements' values at once.)
  auto rc = [&](size_t i, int el) { return "rc" + std::to_string(i) + "[" + J(el) + "]"; };
  in_each_element(n_elem, [&](int el) {
    for (size_t i = 0; i < k_.exprs.size(); ++i)
      if (cache_first_[i] && cache_first_[i] < p) cache_[i] = rc(i, el);
  });
  for (size_t i = 0; i < k_.exprs.size(); ++i) {
    if (cache_first_[i] != p) continue;
    in_each_element(n_elem, [&](int el) {
      line(rc(i, el) + " = " + value(static_cast<int>(i)) + ";");
      cache_[i] = rc(i, el);
    });
  }
  in_each_element(n_elem, [&](int) {
    for (int i : mine) {
      const ir::Expr& e = k_.exprs[i];
      const std::string& a = acc_[i];
      if (!is_arg_reduce(e.op)) {
        line(a + " = " + reduce_combine(e.op, e.type, a, operand(e.operands[0], e.type)) + ";");
        continue;
      }
      std::string v = value(e.operands[0]), at = "(long long)" + lin_red_;
      line("if (" + arg_better(e.op, type(e.operands[0]), v, at, a, a + "i") + ") { " + a + " = " +
           v + "; " + a + "i = " + at + "; }");
    }
  });
  // A word output's pack: its words, stored with the pack's last pair (element 0's offsets).
  auto word = [&](size_t o, const std::string& w) {
    // NOTE: names built with std::string first dodge GCC 12's -Wrestrict false positive.
    const std::string sw = std::string("sw") + std::to_string(o), last = std::to_string(vec_ - 2);
    const std::string at = std::string("o") + std::to_string(n_in_ + o);
    const std::string out = std::string("out") + std::to_string(o);
    line(sw + ".e[(j % " + V + ") / 2] = " + w + ";");
    line("if (j % " + V + " == " + last + ") *reinterpret_cast<" + word_pack(vec_) + "*>(" + out +
         " + (" + at + " - " + last + ")) = " + sw + ";");
  };
  in_each_element(n_elem, [&](int el) {
    std::string jv = J(el) + " % " + V;
    WordFn words = !pair_mode_ ? WordFn()
                   : el == 0   ? WordFn(word)
                               : WordFn([](size_t, const std::string&) {});
    store_outputs(
        p,
        [&](size_t o, const std::string& v, const std::string& f32) {
          std::string os = std::to_string(o), ob = O(el);
          ob += std::to_string(n_in_ + o);
          if (!staged_.empty() && staged_[o]) {  // written out by write_staged_outputs
            line("st" + os + "[r * " + std::to_string(stage_pitch_) + " + lane] = " + v + ";");
            return;
          }
          if (!packed(n_in_ + o)) {
            line("out" + os + "[" + ob + "] = " + v + ";");
            return;
          }
          // The pack starts vec_ - 1 elements before the last one, whose offset is o (scalar
          // loop) or oo (pairs): the store comes with the pack's last element.
          std::string at = "out" + os + " + (" + ob + " - " + std::to_string(vec_ - 1) + ")";
          std::string last = "if (" + jv + " == " + std::to_string(vec_ - 1) + ")";
          if (!in_pairs(n_in_ + o)) {
            line("so" + os + ".e[" + jv + "] = " + v + ";");
            line(last + " *reinterpret_cast<" + pack(n_in_ + o) + "*>(" + at + ") = so" + os + ";");
            return;
          }
          line("so" + os + "[" + jv + "] = " + f32 + ";");
          open(last);
          pack_pairs(buffer_type(n_in_ + o), "so" + os, vec_, "w");
          line("*reinterpret_cast<" + word_pack(vec_) + "*>(" + at + ") = w;");
          close();
        },
        words);
  });
  if (guard) close();
  for (int l = 0; l < loops; ++l) close();
  write_staged_outputs(p);
  for (int i : mine) {
    combine(i, rows);
    done_[i] = 1;
  }
}

// NOTE: a tile's lanes take neighbouring rows, so an output laid out along
// the row (a layer norm over a channels-first tensor permuted to channels-last
// writes channels-last) would be stored a 2-byte element a sector per lane.
// Such outputs go to shared memory (the tile's rows x row length, rows
// `stage_pitch_` apart: a pitch past the row count keeps the read-back free of
// bank conflicts) and the block then writes the tile's rows out whole, in
// memory order. Only for one reduction axis, and up to 40 KiB a block (with
// the tile's reduction arrays under the 48 KiB of static shared memory).
void Writer::plan_staged_outputs(Rows rows) {
  staged_.assign(k_.outputs.size(), 0);
  stage_pitch_ = 0;
  if (rows != Rows::Tile || s_.red.size() != 1) return;
  const size_t red = s_.outer.size(), last = red - 1;
  const int pitch = tile_rows_ + 1;
  // The tile's reduction arrays (reduction_kernel): a value (and an index) a thread each.
  int64_t bytes = 0, room = 46 * 1024;
  for (const ir::Expr& e : k_.exprs)
    if (is_reduce(e.op))
      room -= int64_t{block_} * (is_arg_reduce(e.op) ? 8 + 8 : elem_bytes(e.type) > 4 ? 8 : 4);
  room = std::min<int64_t>(room, 40 * 1024);
  for (size_t o = 0; o < k_.outputs.size(); ++o) {
    const size_t buf = n_in_ + o;
    const int elem = elem_bytes(buffer_type(buf));
    const int64_t across = s_.outer[last] > 1 ? s_.strides[buf][last] : 0;
    if (plan_.out_pass[o] == 0 || s_.strides[buf][red] != 1 || across == 1) continue;
    if (coalescing(across, elem, 32) >= 1) continue;
    const int64_t need = int64_t{pitch} * product(s_.red) * elem;
    if (bytes + need > room) continue;
    bytes += need;
    staged_[o] = 1;
  }
  if (bytes > 0) stage_pitch_ = pitch;
}

void Writer::write_staged_outputs(int pass) {
  std::vector<size_t> mine;
  for (size_t o = 0; o < staged_.size(); ++o)
    if (staged_[o] && plan_.out_pass[o] == pass) mine.push_back(o);
  if (mine.empty()) return;
  const int64_t len = product(s_.red), n_rows = product(s_.outer);
  const std::string L = std::to_string(len), tr = std::to_string(tile_rows_);
  line("__syncthreads();  // the tile's outputs are in shared memory");
  open("for (unsigned e = threadIdx.x; e < " + std::to_string(tile_rows_ * len) +
       "; e += " + std::to_string(block_) + ")");
  line("const unsigned er = e % " + L + ", et = e / " + L + ";");
  line("const " + idx_ + " erow = tile * " + tr + " + et;");
  open("if (erow < " + std::to_string(n_rows) + ")");
  const std::string ob = fresh("sb") + "_", oo = fresh("so") + "_";
  offsets(ob, "erow", s_.outer, 0, "");
  offsets(oo, "er", s_.red, s_.outer.size(), ob);
  for (size_t o : mine) {
    std::string os = std::to_string(o);
    line("out" + os + "[" + oo + std::to_string(n_in_ + o) + "] = st" + os + "[er * " +
         std::to_string(stage_pitch_) + " + et];");
  }
  close();
  close();
  line("__syncthreads();  // the next tile rewrites the staged rows");
}

namespace {
// Ops cheap enough to recompute in every pass from cached operands.
bool cheap(const ir::Kernel& k, int i) {
  const ir::Expr& e = k.exprs[i];
  switch (e.op) {
    case ExprOp::Constant:
    case ExprOp::Index:
    case ExprOp::Cast:
    case ExprOp::Neg:
    case ExprOp::Abs:
    case ExprOp::Sign:
    case ExprOp::Relu:
    case ExprOp::Not:
    case ExprOp::BitNot:
    case ExprOp::IsNan:
    case ExprOp::IsInf:
    case ExprOp::IsFinite:
    case ExprOp::Floor:
    case ExprOp::Ceil:
    case ExprOp::Round:
    case ExprOp::Trunc:
    case ExprOp::Add:
    case ExprOp::Sub:
    case ExprOp::Mul:
    case ExprOp::Maximum:
    case ExprOp::Minimum:
    case ExprOp::Where:
    case ExprOp::Copysign:
      return true;
    case ExprOp::Div:  // by a row value: a multiply by its hoisted reciprocal (see value())
      return is_reduce(k.exprs[e.operands[1]].op);
    default:
      return (e.op >= ExprOp::Eq && e.op <= ExprOp::BitXor);
  }
}
}  // namespace

// Caches, per thread, the per-point values that two or more passes would
// evaluate: the varying Loads (each input element is then read once), the
// costly per-point exprs (softmax's exp) and chains of cheap ones (layer norm's
// input softmax(x) + x with its roundings, and x - mean). Exprs are taken from
// the last one down, since caching an expr spares its operands in the passes
// after it. The budget bounds the values held between two passes (during the
// row reductions); a value is held from the pass that computes it to the last
// pass that reads it.
void Writer::plan_row_cache(Rows rows) {
  size_t n = k_.exprs.size();
  cache_first_.assign(n, 0);
  cache_n_ = 0;
  if (rows == Rows::Thread || rows == Rows::Tile || plan_.n_passes < 2) return;
  int64_t threads = (rows == Rows::Warp ? row_lanes_ : block_) * std::max(vec_, 1);
  int64_t per_thread = (product(s_.red) + threads - 1) / threads * std::max(vec_, 1);
  if (per_thread > kCacheValues) return;
  // seen[i] after need(p): pass p evaluates expr i under the current cache.
  std::vector<char> seen(n);
  auto need = [&](int p) {
    seen.assign(n, 0);
    std::vector<int> todo;
    for (size_t i = 0; i < n; ++i)
      if (is_reduce(k_.exprs[i].op) && plan_.pass[i] == p) todo.push_back(k_.exprs[i].operands[0]);
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (plan_.out_pass[o] == p) todo.push_back(k_.outputs[o].expr);
    while (!todo.empty()) {
      int i = todo.back();
      todo.pop_back();
      if (seen[i]) continue;
      seen[i] = 1;
      if (is_reduce(k_.exprs[i].op)) continue;               // its value is the pass's accumulator
      if (cache_first_[i] && cache_first_[i] < p) continue;  // read from the cache
      for (int o : k_.exprs[i].operands) todo.push_back(o);
    }
  };
  // Per-point exprs evaluated to recompute expr i from loads, row values and the exprs
  // chosen so far (those before i are weighed after it, so their cost counts here).
  auto recompute_cost = [&](int i) {
    std::vector<char> visited(n);
    std::vector<int> todo{i};
    int cost = 0;
    while (!todo.empty()) {
      int j = todo.back();
      todo.pop_back();
      const ir::Expr& e = k_.exprs[j];
      if (visited[j] || !plan_.varies[j] || is_reduce(e.op) || (j != i && cache_first_[j]))
        continue;
      visited[j] = 1;
      if (e.op == ExprOp::Load || e.op == ExprOp::Index) continue;
      ++cost;
      for (int o : e.operands) todo.push_back(o);
    }
    return cost;
  };
  // held[b]: bytes a thread holds between pass b and pass b + 1.
  std::vector<int64_t> held(plan_.n_passes + 1);
  for (size_t i = n; i-- > 0;) {
    const ir::Expr& e = k_.exprs[i];
    int ii = static_cast<int>(i);
    if (!plan_.varies[i] || is_reduce(e.op) || e.op == ExprOp::Gather) continue;
    // NOTE: a chain of three cheap ops or more is worth a register per value;
    // a conversion or a single add of cached values is not.
    if (e.op != ExprOp::Load && cheap(k_, ii) && recompute_cost(ii) < 3) continue;
    int first = 0, last = 0, passes = 0;
    for (int p = 1; p <= plan_.n_passes; ++p) {
      need(p);
      if (!seen[i]) continue;
      if (!first) first = p;
      last = p;
      ++passes;
    }
    if (passes < 2) continue;
    int64_t size = per_thread * (elem_bytes(type(ii)) > 4 ? 8 : 4);
    bool fits = true;
    for (int b = first; b < last; ++b) fits &= held[b] + size <= kCacheBytes;
    if (!fits) continue;
    for (int b = first; b < last; ++b) held[b] += size;
    cache_first_[i] = first;
  }
  for (size_t i = 0; i < n; ++i)
    if (cache_first_[i]) cache_n_ = static_cast<int>(per_thread);
}

// Folds the per-thread accumulators of reduction `i` so that every thread of
// the row's warp or block holds the row's result.
void Writer::combine(int i, Rows rows) {
  if (rows == Rows::Thread) return;
  const ir::Expr& e = k_.exprs[i];
  bool arg = is_arg_reduce(e.op);
  ST t = arg ? type(e.operands[0]) : e.type;
  std::string T = reg_type(t), a = acc_[i], ai = a + "i";
  std::string sh = "sh" + std::to_string(i), shi = "shi" + std::to_string(i);
  // Folds the value `ov` (and index `oi`) into the accumulator.
  auto fold = [&](const std::string& ov, const std::string& oi) {
    if (!arg) {
      line(a + " = " + reduce_combine(e.op, t, a, ov) + ";");
      return;
    }
    line("if (" + arg_better(e.op, t, ov, oi, a, ai) + ") { " + a + " = " + ov + "; " + ai + " = " +
         oi + "; }");
  };
  if (rows ==
      Rows::Tile) {  // a tree over the slices: slice s of row `lane` at sh[s * tile_rows_ + lane]
    std::string step = std::to_string(tile_rows_);
    line(sh + "[threadIdx.x] = " + a + ";");
    if (arg) line(shi + "[threadIdx.x] = " + ai + ";");
    line("__syncthreads();");
    open("for (unsigned s = " + std::to_string(slices_ / 2) + "; s > 0; s >>= 1)");
    open("if (slice < s)");
    line("const " + T + " ov = " + sh + "[threadIdx.x + s * " + step + "];");
    if (arg) line("const long long oi = " + shi + "[threadIdx.x + s * " + step + "];");
    fold("ov", "oi");
    line(sh + "[threadIdx.x] = " + a + ";");
    if (arg) line(shi + "[threadIdx.x] = " + ai + ";");
    close();
    line("__syncthreads();");
    close();
    line(a + " = " + sh + "[lane];");
    if (arg) line(ai + " = " + shi + "[lane];");
    line("__syncthreads();  // the next reduction or tile rewrites " + sh);
    return;
  }
  // Warp rows of fewer lanes: xor steps below row_lanes_ stay inside the row's lanes.
  open("for (int s = " + std::to_string(rows == Rows::Warp ? row_lanes_ / 2 : 16) +
       "; s > 0; s >>= 1)");
  line("const " + T + " ov = (" + T + ")__shfl_xor_sync(0xffffffffu, (" + shuffle_type(t) + ")" +
       a + ", s);");
  if (arg) line("const long long oi = __shfl_xor_sync(0xffffffffu, " + ai + ", s);");
  fold("ov", "oi");
  close();
  if (rows != Rows::Block) return;
  open("if ((threadIdx.x & 31) == 0)");
  line(sh + "[threadIdx.x >> 5] = " + a + ";");
  if (arg) line(shi + "[threadIdx.x >> 5] = " + ai + ";");
  close();
  line("__syncthreads();");
  line(a + " = " + sh + "[0];");
  if (arg) line(ai + " = " + shi + "[0];");
  open("for (int w = 1; w < " + std::to_string(block_ / 32) + "; ++w)");
  line("const " + T + " ov = " + sh + "[w];");
  if (arg) line("const long long oi = " + shi + "[w];");
  fold("ov", "oi");
  close();
  // NOTE: with two or more block reductions, another reduction's barrier lies
  // between this row's reads of `sh` and the next row's writes, so only a
  // single reduction needs a barrier of its own here.
  int reductions = 0;
  for (const ir::Expr& x : k_.exprs) reductions += is_reduce(x.op);
  if (reductions == 1) line("__syncthreads();  // the next row reuses " + sh);
}

}  // namespace tl::codegen::cuda
