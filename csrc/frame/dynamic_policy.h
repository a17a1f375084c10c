#pragma once
// Dynamic shapes, first slice (docs/internals/dynamic-shapes.md): decides
// whether a capture's CPU kernels take their sizes at run time, so that one
// compiled kernel serves every size of the same structure, and checks the
// ranges mark_dynamic(min=, max=) gave.
#include <Python.h>

#include <string>

#include "capture/capture.h"
#include "frame/compiled_frame.h"

namespace tl::frame {

struct DynamicChoice {
  bool runtime_sizes = false;
  // Every dimension may change (dynamic=True, automatic), not only the marked ones: which
  // dimensions a size-generic entry lets change (frame/size_generic.h).
  bool all_dims = false;
  std::string why;  // for the recompiles log: "automatic: ...", "dynamic=True", ...
};

// dynamic=False: never. dynamic=True: always. dynamic=None (automatic): when an
// input is marked dynamic (torchlite.mark_dynamic, torch._dynamo.mark_dynamic
// or maybe_mark_dynamic), or when `code` already has an entry of this config
// and this capture is at a new size: a tensor input has sizes no earlier entry's
// input of the same source had, or no earlier entry shares a tensor input with it.
// A user frame's recompile at sizes seen before (a kwarg flag such as use_cache,
// another branch) keeps constant sizes (resume functions and loop bodies do not): runtime-size
// kernels are slower (GPT-2's add + layer norm on an H100, bf16 8x512: 16.4 against 7.6 us). Throws
// ValueError naming the input and the dimension when an input's size is outside
// its mark_dynamic range. Borrows `code`.
DynamicChoice choose_dynamic(PyCodeObject* code, const CompileConfig& config,
                             const capture::CaptureResult& res);

// The sizes of `res`'s tensor graph inputs, by source (CacheEntry::input_sizes).
std::vector<std::pair<std::string, std::vector<int64_t>>> input_sizes_of(
    const capture::CaptureResult& res);

// The sizes that stay model constants in `res`'s compile with runtime sizes
// (pipeline::PassContext::static_sizes, sorted): every size of its nn.Parameter inputs (their
// guards keep them exact unless marked) and, for a size-generic entry (`generic`: every size
// its trace passed to an op is an expression of the symbols or was pinned by a relation), the
// int constants of its nodes' arguments (`view(b, t, 12, 64)`) that equal no size of another
// tensor input (a size the trace pinned). Sizes 0 and 1 are literals anyway. A guess: a size
// taken for a constant that then changes costs a kernel compile, never a wrong result.
// Leading sizes of inputs (the batch, the sequence length: every dimension but the last of a
// tensor input that is not an unmarked nn.Parameter) are never taken for constants: a batch of
// 2 in a BERT with 2 token types would otherwise be a literal in the kernels of the sizes where
// it is 2 (a kernel compile when it changes).
std::vector<int64_t> static_sizes_of(const capture::CaptureResult& res, bool generic);

// `static_sizes` (sorted) without the leading sizes (as static_sizes_of) of `inputs` (a
// size-generic graph's inputs at new sizes; borrowed): a compile of new sizes marks none of
// its batch or sequence axes static where they equal a model constant. CPU inputs only: CUDA
// kernels keep the model's constants static at every size, so a length equal to a constant
// (64 = the hidden width) finds the text of the other lengths instead of compiling one
// without that constant (tests/python/cuda/test_cuda_runtime_sizes.py attention sweep).
std::vector<int64_t> without_leading_input_sizes(std::vector<int64_t> static_sizes,
                                                 PyObject* const* inputs, size_t n);

struct ExtraState;

// At the cache size limit, after a miss on `reason`: when the miss is a tensor
// size mismatch and an entry of `config_id` has runtime sizes, removes the
// least recently used such entry (a new size then recompiles without a kernel
// compile, instead of the frame running eagerly) and returns true.
bool evict_for_new_size(ExtraState& st, int config_id, const std::string& reason);

}  // namespace tl::frame
