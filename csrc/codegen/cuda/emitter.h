#pragma once
// The CUDA C writer behind emit_cuda_kernel (kernel_text.cpp: analysis,
// expressions, pointwise entries; reduce_text.cpp: row strategies and
// reduction passes). Internal to codegen/cuda.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "codegen/common/loop_space.h"
#include "codegen/common/pass_plan.h"
#include "codegen/common/reduce_schedule.h"
#include "codegen/cuda/cuda_kernel.h"
#include "codegen/cuda/scalar_text.h"

namespace tl::codegen::cuda {

class Writer {
 public:
  Writer(const ir::Kernel& k, const std::string& name, const Target& t);
  CudaKernel run();

 private:
  // Where the current scope reads buffer `b`'s element (an lvalue text).
  using ElemRef = std::function<std::string(int b)>;

  [[noreturn]] void fail(size_t i, const std::string& why) const;
  ST type(int i) const { return k_.exprs[i].type; }
  void analyse();
  void choose_index_type();
  std::string params() const;
  std::string signature(const std::string& name, int block) const;
  // Opens entry `name`'s body: the signature, then the wait for the prior grid where the
  // target has programmatic dependent launch (sm_90+).
  void open_kernel(const std::string& name, int block);
  // Expressions: one `const T vN = ...;` line per expr on first use in a scope,
  // which reads buffer b through ref(b) (Load) or at element offset `off`b
  // (Gather), at outer linear index `outer` and reduction linear index `red`.
  void new_scope(ElemRef ref, std::string outer, std::string red = "0", std::string off = "o") {
    ref_ = std::move(ref);
    lin_outer_ = std::move(outer);
    lin_red_ = std::move(red);
    off_ = std::move(off);
    cache_.assign(k_.exprs.size(), std::string());
  }
  std::string index_value(int64_t axis) const;
  std::string value(int i);
  // Whether an expr at or below i that no line of this scope has computed yet satisfies `hit`
  // (a Load or Gather: memory not read yet; CheckIndex), reductions aside; `seen` marks visits.
  bool uncomputed_below(int i, bool (*hit)(ir::ExprOp), std::vector<char>& seen) const;
  // A Where whose operands read memory, as an if/else that computes only the chosen operand.
  std::string branching_where(int i);
  std::string operand(int i, ST t) { return convert(value(i), type(i), t); }
  // Writes each output of `pass` through `store(o, memory_value, f32)`; f32 is
  // the float32 value a float16/bfloat16 output rounds (empty for other types),
  // for entries that convert neighbouring elements in pairs (pair_to_memory).
  // With `word` (pair evaluation), outputs that word_output() names go there instead, as
  // the word of both elements' bits.
  using StoreFn = std::function<void(size_t, const std::string&, const std::string&)>;
  using WordFn = std::function<void(size_t, const std::string&)>;
  void store_outputs(int pass, const StoreFn& store, const WordFn& word = nullptr);
  // In pair evaluation: output o moves in packs and its value is a pair op of its own
  // 16-bit type, so both elements' bits are one word (pair_word), stored as it is.
  bool word_output(size_t o) const;
  // One 32-bit word holding float32 values lo and hi as 16-bit floats of type t.
  static std::string pair_to_memory(ST t, const std::string& lo, const std::string& hi);
  // The pack type of n 16-bit values as n / 2 words.
  static std::string word_pack(int n);
  // Declares `pack` (word_pack(n)) holding the float32 array `floats`[n] as type t.
  void pack_pairs(ST t, const std::string& floats, int n, const std::string& pack);
  void line(const std::string& s) { os_ << indent_ << s << "\n"; }
  void open(const std::string& s) {
    line(s + " {");
    indent_ += "  ";
  }
  void close() {
    indent_.resize(indent_.size() - 2);
    line("}");
  }
  // `prefix`k = offset of buffer k at the coordinates `coords` of the given axes.
  void offsets(const std::string& prefix, const std::string& lin, const std::vector<int64_t>& sizes,
               size_t first_axis, const std::string& base_prefix);
  std::string fresh(const std::string& stem) { return stem + std::to_string(tmp_++); }
  // Number `v` of the loop space as text: the literal, or with runtime sizes (values other
  // than 0 and 1) the slot of the dims parameter that `site` (what the number is: "a2" loop
  // axis 2's size, "s1_2" buffer 1's stride along it, "f1" its offset, "n" the points, "rows",
  // "len", ...) got on first use, its value appended to out_.dims.
  std::string num(const std::string& site, int64_t v);
  // Number v in the dims parameter's slot for `site`, whatever its value (num() without the
  // literals for 0 and 1).
  std::string dim_slot(const std::string& site, int64_t v);
  // (multiplier, shift) dividing a 32-bit index below 2^31 by d (2 <= d < 2^31).
  static std::pair<int64_t, int> magic_division(int64_t d);
  // tl_idiv's mode for expr i, an integer division by a runtime constant written with its magic
  // numbers (value()); -1 for any other expr.
  int magic_mode(int i) const;
  // num() for a number along loop axis `axis` (a size or a stride): a literal for the reduced
  // axes of a constant row (constant_row_).
  std::string axis_num(const std::string& site, size_t axis, int64_t v);
  // Loop axis `axis` (outer then red) is a model constant's size (LoopSpace::fixed).
  bool fixed_axis(size_t axis) const;

  // kernel_text.cpp: pointwise
  void pointwise_scalar(int unroll);  // points per thread per loop step
  // The group entry (ir::Kernel::grouped): the scalar loop over one member of a table of
  // members (CudaKernel::group), chosen by the block's index.
  void pointwise_group(int unroll);
  // Computes and stores every output at outer linear index `lin` (a loop variable).
  void point_at(const std::string& lin);
  ST buffer_type(size_t buf) const;  // buffers: inputs, then outputs
  // Buffers in memory (inputs, outputs); coordinate pseudo-buffers follow them.
  size_t n_memory() const { return k_.inputs.size() + k_.outputs.size(); }
  bool is_coordinate(size_t buf) const { return buf >= n_memory(); }
  // Input `buf`'s element at offset `prefix`buf, or that offset itself for a
  // coordinate buffer (its offset is the coordinate).
  std::string at_offset(const std::string& prefix, int buf) const;
  // Elements per 16-byte pack of the widest buffer contiguous along `axis`,
  // when every such buffer starts each run along it pack-aligned; else 0.
  int pack_width(size_t axis) const;
  bool vector_width(int* width) const;
  int vector_unroll() const;  // packs per thread per step of the vectorised entry
  void pointwise_vector(int width);
  // How an i64 expr changes from one element of a pack to the next (along the
  // innermost loop axis): not at all, by exactly 1, by 0 or 1, or otherwise.
  enum class Steps { Zero, Unit, ZeroOrUnit, Other };
  Steps inner_steps(int i) const;
  // A Gather the vectorised entry reads a pack at a time (its element offsets
  // step by 0 or 1 along the pack).
  bool packable_gather(int i) const;
  // Vectorised entry, step u: reads Gather i's pack into `name` (one 16-byte
  // load when its offsets are contiguous and aligned, one element when they are
  // all one, else element by element).
  void gather_pack(int u, int i, int width, const std::string& name, const std::string& guard);
  // True when every value of integer expr i is a multiple of `width` (a power of two), known
  // from its constants: a pool window's offset (a clamped coordinate times a row stride).
  bool multiple_of_width(int i, int width) const;
  // True when expr i has one value over a pack (coordinates of other axes, constants, and
  // comparisons of a coordinate along the pack with a bound on a pack boundary: a cat's
  // part test along the innermost axis, unit_start).
  bool pack_uniform(int i) const;
  // For an integer expr that steps by exactly 1 along a pack of `width` elements: its value
  // at the pack's first element modulo `width` (every pack starts there); nullopt when that
  // is not known at emission time (another step, runtime sizes, misaligned strides).
  std::optional<int64_t> unit_start(int i, int width) const;
  // Expr i is x < t, x <= t, x > t or x >= t (either order) of such an x with a constant t
  // whose edge falls on a pack boundary: one value over a pack.
  bool boundary_test(int i) const;
  // Vectorised entry, step u: per expr, the condition (C text, computed here at the
  // pack's first element) under which some output uses its value; empty: always.
  // Only Wheres with a pack-uniform condition (stack's part, a cat along an outer axis or
  // along the packs with its bounds on pack boundaries) narrow it, so a pack reads the
  // parts its outputs take.
  std::vector<std::string> pack_guards(int u);
  int64_t grid_for(int64_t threads, int block) const;

  // pair_text.cpp: two neighbouring elements per step of the vectorised
  // reduction and pointwise entries, one scope each (the current one and other_).
  struct Scope {
    ElemRef ref;
    std::string outer, red, off;
    std::vector<std::string> cache;
  };
  void swap_scope();
  // fn(el) for el = 0 .. n - 1, each with element el's scope current (n: 1, or 2 in pairs).
  void in_each_element(int n, const std::function<void(int el)>& fn);
  // Element e's scope reads buffer b through ref(e)(b) at reduction index red<e>
  // (offsets "o" and "oo"); leaves element 0's scope current.
  void new_pair_scope(const std::function<ElemRef(int elem)>& ref, std::string outer,
                      const std::string& red0, const std::string& red1);
  // The pointwise vector entry's loop over a pack of `width` elements, two a step: `ref(j)`
  // reads element j; `store(o, j, v, f32)` stores output o's element j (as StoreFn), `word`
  // word outputs' words (at element j, even).
  using PairStore =
      std::function<void(size_t, const std::string&, const std::string&, const std::string&)>;
  void pointwise_pairs(int width, const std::function<ElemRef(const std::string& j)>& ref,
                       const std::string& outer, const PairStore& store, const WordFn& word);
  // `text` evaluated in element elem's scope.
  std::string in_scope(int elem, const std::function<std::string()>& text);
  bool exact_in(int i, ST h) const;
  bool pair_op(int i) const;  // a 16-bit add/sub/mul of two 16-bit values
  bool any_pair_op() const;
  std::string pair_word(int i, ST h);
  std::string pair_element(int i);

  // reduce_text.cpp
  // Tile: 32 neighbouring rows a block, each split between slices_ warps.
  enum class Rows { Thread, Warp, Block, Tile };
  Rows choose_rows() const;
  ReduceSchedule tile_schedule() const;
  ReduceTarget tile_target() const;  // the lanes a tile may take on this kernel's target
  // Writes the entry `entry`: scalar, or vectorised when vec_ > 0.
  void reduction_kernel(const std::string& entry);
  bool reduce_vector_width(int* width) const;
  // In the vectorised reduction entry: whether `buf` moves in packs, and its pack type.
  bool packed(size_t buf) const;
  std::string pack(size_t buf) const;
  void reduce_pass(int p, Rows rows);
  void plan_row_cache(Rows rows);
  void plan_staged_outputs(Rows rows);
  void write_staged_outputs(int pass);
  void combine(int i, Rows rows);

  const ir::Kernel& k_;
  std::string name_;
  Target target_;
  LoopSpace s_;  // index buffers in pointwise kernels only (coordinate_buffers)
  int n_in_;
  std::string idx_ = "unsigned";  // index type: 32-bit unless sizes need 64
  // The scalar pointwise loop's block index and block count (the group entry: the member's).
  std::string block_id_ = "blockIdx.x", blocks_ = "gridDim.x";
  std::ostringstream os_;
  std::string indent_;
  ElemRef ref_;
  std::string lin_outer_, lin_red_, off_;
  bool half_outputs_ = false;  // every output is float16/bfloat16 (cheaper exp, see value())
  int gathers_ = 0;            // Gather exprs: a vector entry only if all are packable
  std::vector<char> loaded_;   // per input: some Load reads it (not only Gathers)
  // Vectorised entry: per Gather expr, the pack holding its elements (else empty).
  std::vector<std::string> gather_pack_;
  // Where a Gather's element offset starts (buffer b): empty means off_ + b.
  std::function<std::string(int b)> gather_base_;
  int64_t gather_low_ = 0, gather_high_ = 0;  // the constant offsets Gathers add
  std::vector<std::string> cache_;            // expr values of the current scope
  std::vector<std::string> acc_;              // reduction accumulators (row scope)
  std::vector<char> done_;                    // reductions whose pass has finished
  std::string rlin_;                          // linear index over the reduction axes
  // Runtime sizes: per expr, an integer Constant the text reads from the dims parameter
  // (analyse()).
  std::vector<char> runtime_constant_;
  int tmp_ = 0;
  int block_ = 256;
  int min_blocks_ = 0;  // __launch_bounds__'s second argument for the entry emitted next; 0: none
  PassPlan plan_;
  // Row cache (warp/block rows that fit in registers): each thread keeps the
  // values of the Loads that several passes read in `rc<expr>[cache_n_]`,
  // loaded by the first pass that reads them (cache_first_[i]; 0 = not cached).
  int cache_n_ = 0;
  int slices_ = 1;          // Tile rows: lane groups that split each row (choose_rows)
  int tile_rows_ = 32;      // Tile rows: neighbouring rows of a tile
  int row_lanes_ = 32;      // Warp rows: lanes a row (a warp holds 32 / row_lanes_ rows)
  bool row_guard_ = false;  // Warp rows: the last warp's rows may pass the end
  // Tile rows: per-element outputs written through shared memory (plan_staged_outputs);
  // stage_pitch_ elements a tile row apart there.
  std::vector<char> staged_;
  int stage_pitch_ = 0;
  // Runtime sizes whose text already holds the reduced row's length (analyse()): the row's
  // length and strides along it are literals, only the outer numbers are dims.
  bool constant_row_ = false;
  // Runtime sizes whose reduced row has a length known in the text: a constant row, or a row
  // over model constants only (ir::Kernel::static_axes): its length is a literal.
  bool static_row_ = false;
  int vec_ = 0;  // elements per 16-byte pack in the vectorised reduction entry; 0 = scalar
  std::vector<int> cache_first_;
  // Where reading memory branches (branching_where): in scopes whose element references are
  // plain text (the scalar pointwise entry), not where a reference loads a pack on first use.
  bool branch_wheres_ = false;
  bool pair_mode_ = false;         // pair evaluation (pair_text.cpp) in this entry
  int elem_ = 0;                   // the current scope's element in pair evaluation
  Scope other_;                    // the other element's scope
  std::vector<std::string> pair_;  // exprs' pair words in this step
  CudaKernel out_;
  std::map<std::string, size_t> slots_;  // num(): site -> index in out_.dims
};

}  // namespace tl::codegen::cuda
