// The CUDA C emitter, checked without a GPU: each kernel is compiled by NVRTC
// to PTX for compute_90 and the PTX must hold its entry points. Skips (with a
// warning) only when NVRTC cannot be loaded.
#include <algorithm>
#include <catch2/catch.hpp>

#include "codegen/cuda/cuda_kernel.h"
#include "core/errors.h"
#include "kernel_builder.h"
#include "runtime/cuda/nvrtc.h"

using namespace tl::test;
namespace ir = tl::ir;
using tl::codegen::cuda::CudaKernel;
using tl::codegen::cuda::emit_cuda_kernel;
using tl::runtime::cuda::nvrtc_available;
using tl::runtime::cuda::nvrtc_compile;

namespace {

#define REQUIRE_NVRTC_OR_SKIP()                     \
  do {                                              \
    std::string why;                                \
    if (!nvrtc_available(&why)) {                   \
      WARN("NVRTC not loadable, skipped: " << why); \
      SUCCEED();                                    \
      return;                                       \
    }                                               \
  } while (0)

// Compiles both entries to PTX; returns the PTX.
std::string compile(const CudaKernel& ck) {
  INFO(ck.source);
  std::string ptx = nvrtc_compile(ck.source, ck.name, "compute_90");
  CHECK(ptx.find(".entry " + ck.name + "(") != std::string::npos);
  if (!ck.vector_name.empty())
    CHECK(ptx.find(".entry " + ck.vector_name + "(") != std::string::npos);
  return ptx;
}

CudaKernel emit(const ir::Kernel& k) { return emit_cuda_kernel(k, "tl_" + k.name, {}); }

}  // namespace

TEST_CASE("a contiguous pointwise chain has a 16-byte vector entry and compiles",
          "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  KernelBuilder b("chain", {64, 1000});
  int x = b.load(b.input(ST::F32, b.contiguous()), ST::F32);
  int y =
      b.expr(ExprOp::Add, ST::F32,
             {b.expr(ExprOp::Mul, ST::F32, {x, b.constant(2, ST::F32)}), b.constant(1, ST::F32)});
  int z = b.expr(ExprOp::Sub, ST::F32,
                 {b.expr(ExprOp::Sigmoid, ST::F32, {y}), b.expr(ExprOp::Tanh, ST::F32, {x})});
  b.output(z, ST::F32, b.contiguous());
  CudaKernel ck = emit(b.k);
  CHECK(ck.vector_name == "tl_chain_v");
  CHECK(ck.aligned_params == std::vector<int>{0, 1});
  CHECK(ck.source.find("tl_pack<float, 4>") != std::string::npos);
  CHECK(ck.source.find("unsigned long long i") == std::string::npos);  // 32-bit indices
  CHECK(ck.grid >= 1);
  std::string ptx = compile(ck);
  CHECK(ptx.find("ld.global.nc.v4.f32") != std::string::npos);
}

namespace {
// out = x + y over [8, 16], x contiguous, y with the given strides.
CudaKernel add_over_rows(const std::string& name, std::vector<int64_t> y_strides) {
  KernelBuilder b(name, {8, 16});
  int x = b.load(b.input(ST::F32, b.contiguous()), ST::F32);
  int y = b.load(b.input(ST::F32, std::move(y_strides)), ST::F32);
  b.output(b.expr(ExprOp::Add, ST::F32, {x, y}), ST::F32, b.contiguous());
  return emit(b.k);
}
}  // namespace

TEST_CASE("an operand broadcast along rows moves in packs too", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  CudaKernel ck = add_over_rows("bcast", {0, 1});
  CHECK(ck.vector_name == "tl_bcast_v");
  CHECK(ck.aligned_params == std::vector<int>{0, 1, 2});
  compile(ck);
}

TEST_CASE("a transposed operand keeps the scalar entry only", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  CudaKernel ck = add_over_rows("transposed", {1, 8});
  CHECK(ck.vector_name.empty());
  compile(ck);
}

TEST_CASE("a broadcast scalar still allows the vector entry", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  KernelBuilder b("scalar_bcast", {4096});
  int x = b.load(b.input(ST::BF16, {1}), ST::BF16);
  int s = b.load(b.input(ST::F32, {0}), ST::F32);
  int m = b.expr(ExprOp::Mul, ST::F32, {b.expr(ExprOp::Cast, ST::F32, {x}), s});
  b.output(b.expr(ExprOp::Cast, ST::BF16, {m}), ST::BF16, {1});
  CudaKernel ck = emit(b.k);
  CHECK(ck.vector_name == "tl_scalar_bcast_v");
  CHECK(ck.aligned_params == std::vector<int>{0, 2});
  compile(ck);
}

TEST_CASE("f16 and bf16 casts convert through f32 and compile", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  KernelBuilder b("casts", {3, 1001});
  int h = b.load(b.input(ST::F16, b.contiguous()), ST::F16);
  int f = b.expr(ExprOp::Cast, ST::F32, {h});
  b.output(f, ST::F32, b.contiguous());
  b.output(b.expr(ExprOp::Cast, ST::BF16, {f}), ST::BF16, b.contiguous());
  b.output(b.expr(ExprOp::Cast, ST::F16, {b.expr(ExprOp::Cast, ST::F64, {h})}), ST::F16,
           b.contiguous());
  b.output(b.expr(ExprOp::Cast, ST::Bool, {h}), ST::Bool, b.contiguous());
  CudaKernel ck = emit(b.k);
  CHECK(ck.source.find("cvt.rn.f16.f32") != std::string::npos);
  std::string ptx = compile(ck);
  CHECK(ptx.find("cvt.f32.f16") != std::string::npos);
}

TEST_CASE("softmax-like multi-pass reductions compile for every row strategy", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  // {rows, row length}: warp per row, block per row, thread per row (short rows).
  for (auto [rows, len] : {std::pair<int64_t, int64_t>{512, 128}, {16, 5000}, {4096, 7}}) {
    KernelBuilder b("softmax_" + std::to_string(len), {rows, len}, 1);
    int x = b.load(b.input(ST::BF16, b.contiguous()), ST::F32);
    int mx = b.expr(ExprOp::ReduceMax, ST::F32, {x});
    int e = b.expr(ExprOp::Exp, ST::F32, {b.expr(ExprOp::Sub, ST::F32, {x, mx})});
    int sum = b.expr(ExprOp::ReduceSum, ST::F32, {e});
    b.output(b.expr(ExprOp::Div, ST::F32, {e, sum}), ST::BF16, b.contiguous());
    b.output(sum, ST::F32, {1, 0});
    CudaKernel ck = emit(b.k);
    std::string ptx = compile(ck);
    if (len > 16) CHECK(ptx.find("shfl.sync.bfly") != std::string::npos);
    if (len > 1024) CHECK(ck.block >= 256);
  }
}

namespace {
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; ++at) ++n;
  return n;
}

// softmax(x) over rows of `len` bf16 values, then a layer norm of it: five
// passes over the row, each reading x.
ir::Kernel softmax_ln(int64_t rows, int64_t len) {
  KernelBuilder b("softmax_ln_" + std::to_string(len), {rows, len}, 1);
  int x = b.load(b.input(ST::BF16, b.contiguous()), ST::F32);
  int mx = b.expr(ExprOp::ReduceMax, ST::F32, {x});
  int e = b.expr(ExprOp::Exp, ST::F32, {b.expr(ExprOp::Sub, ST::F32, {x, mx})});
  int sum = b.expr(ExprOp::ReduceSum, ST::F32, {e});
  int y = b.expr(ExprOp::Add, ST::F32, {b.expr(ExprOp::Div, ST::F32, {e, sum}), x});
  int n = b.constant(static_cast<double>(len), ST::F32);
  int mean = b.expr(ExprOp::Div, ST::F32, {b.expr(ExprOp::ReduceSum, ST::F32, {y}), n});
  int d = b.expr(ExprOp::Sub, ST::F32, {y, mean});
  int var = b.expr(ExprOp::Div, ST::F32,
                   {b.expr(ExprOp::ReduceSum, ST::F32, {b.expr(ExprOp::Mul, ST::F32, {d, d})}), n});
  int w = b.load(b.input(ST::BF16, {0, 1}), ST::F32);
  int inv = b.expr(ExprOp::Rsqrt, ST::F32, {var});
  int out = b.expr(ExprOp::Mul, ST::F32, {b.expr(ExprOp::Mul, ST::F32, {d, inv}), w});
  b.output(out, ST::BF16, b.contiguous());
  return b.k;
}
}  // namespace

TEST_CASE("a softmax + layer norm row that fits in registers is read from memory once",
          "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  // Warp per row (128 = 4 per lane) and block per row (1000 = 4 per thread of 256).
  for (auto [rows, len] : {std::pair<int64_t, int64_t>{4096, 128}, {16, 1000}}) {
    CudaKernel ck = emit(softmax_ln(rows, len));
    INFO(ck.source);
    // Both entries: x and exp(x - max) are cached; the weight (read by the last
    // pass only) is not. The vector entry loads x in packs, once.
    REQUIRE(ck.vector_name == ck.name + "_v");
    size_t split = ck.source.find(ck.vector_name + "(");
    std::string scalar = ck.source.substr(0, split), vector = ck.source.substr(split);
    CHECK(scalar.find(" rc0[") != std::string::npos);
    CHECK(count(scalar, "in0[") == 1);
    CHECK(count(scalar, "in1[") == 1);
    // exp once per element; the bf16 output makes it the special-function-unit exp.
    CHECK(count(scalar, "tl_hexp(v") == 1);
    CHECK(count(vector, "pk0 = ") == 1);
    CHECK(count(vector, "in0[") == 0);
    CHECK(count(vector, "tl_hexp(v") == 1);
    std::string ptx = compile(ck);
    CHECK(ptx.find(".local") == std::string::npos);  // the cache stays in registers
  }
}

TEST_CASE("a 4096-wide softmax + layer norm row takes 128 threads and caches one array a pass",
          "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  // 32 values a thread, one array of them held between two passes: exp(x - max) into the
  // pass of softmax(x) + x, that into the pass of x - mean, that into the output's pass. x
  // is read again where needed (from L1/L2), which measured faster than 256 threads caching
  // it too (see reduce_text.cpp).
  CudaKernel ck = emit(softmax_ln(8192, 4096));
  INFO(ck.source);
  CHECK(ck.block == 128);
  REQUIRE(ck.vector_name == ck.name + "_v");
  size_t split = ck.source.find(ck.vector_name + "(");
  std::string scalar = ck.source.substr(0, split);
  CHECK(scalar.find(" rc3[32]") != std::string::npos);   // exp(x - max), expr 3
  CHECK(scalar.find(" rc6[32]") != std::string::npos);   // softmax(x) + x, expr 6
  CHECK(scalar.find(" rc10[32]") != std::string::npos);  // x - mean, expr 10
  CHECK(scalar.find(" rc0[") == std::string::npos);
  CHECK(count(scalar, "tl_hexp(v") == 1);
  std::string ptx = compile(ck);
  CHECK(ptx.find(".local") == std::string::npos);
}

TEST_CASE("a row too long for the register cache keeps re-reading it every pass",
          "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  CudaKernel ck = emit(softmax_ln(4, 1 << 16));
  CHECK(ck.source.find(" rc") == std::string::npos);
  CHECK(count(ck.source, "in0[") == 5);
  compile(ck);
}

TEST_CASE("a column reduction over a strided axis compiles", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  KernelBuilder b("colsum", {3, 300}, 1);
  int x = b.load(b.input(ST::F64, {1, 3}), ST::F64);
  b.output(b.expr(ExprOp::ReduceProd, ST::F64, {x}), ST::F64, {1, 0});
  compile(emit(b.k));
}

TEST_CASE("argmax and argmin kernels compile for float and integer rows", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  for (ST t : {ST::F32, ST::I8, ST::Bool, ST::F16}) {
    for (int64_t len : {5, 100, 3000}) {
      KernelBuilder b("argx_" + std::to_string(len), {6, len}, 1);
      int x = b.load(b.input(t, b.contiguous()), t);
      b.output(b.expr(ExprOp::ReduceArgMax, ST::I64, {x}), ST::I64, {1, 0});
      b.output(b.expr(ExprOp::ReduceArgMin, ST::I64, {x}), ST::I64, {1, 0});
      b.output(b.expr(ExprOp::ReduceMin, t, {x}), t, {1, 0});
      compile(emit(b.k));
    }
  }
}

TEST_CASE("every unary and binary op compiles for every dtype it supports", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  // NOTE: f32 and f16 math is the text of bf16's (all compute in float); each float
  // kernel costs NVRTC seconds (libdevice's transcendentals are inlined).
  for (ST t : {ST::F64, ST::BF16, ST::I8, ST::I16, ST::I32, ST::I64, ST::U8, ST::Bool}) {
    bool fl = t == ST::F32 || t == ST::F64 || t == ST::F16 || t == ST::BF16;
    KernelBuilder b(std::string("ops_") + ir::scalar_type_name(t), {257});
    int x = b.load(b.input(t, {1}), t);
    int y = b.load(b.input(t, {1}), t);
    for (int op = static_cast<int>(ExprOp::Neg); op <= static_cast<int>(ExprOp::Copysign); ++op) {
      auto o = static_cast<ExprOp>(op);
      if (o == ExprOp::Cast || (fl && (o == ExprOp::BitNot || o == ExprOp::BitAnd ||
                                       o == ExprOp::BitOr || o == ExprOp::BitXor)))
        continue;
      bool float_only = (o >= ExprOp::Reciprocal && o <= ExprOp::Erfinv) || o == ExprOp::Atan2 ||
                        o == ExprOp::Copysign;
      if (!fl && float_only) continue;
      bool unary = o <= ExprOp::Cast;
      bool pred = ir::is_comparison(o) || o == ExprOp::IsNan || o == ExprOp::IsInf ||
                  o == ExprOp::IsFinite || o == ExprOp::Not || o == ExprOp::And ||
                  o == ExprOp::Or || o == ExprOp::Xor;
      ST rt = pred ? ST::Bool : t;
      int e = b.expr(o, rt, unary ? std::vector<int>{x} : std::vector<int>{x, y});
      b.output(e, rt, {1});
    }
    int w = b.expr(ExprOp::Where, t, {b.expr(ExprOp::Lt, ST::Bool, {x, y}), x, y});
    b.output(w, t, {1});
    compile(emit(b.k));
  }
}

TEST_CASE("an embedding row gather checks its index with a device-side assert", "[codegen][cuda]") {
  // out[r, d] = weight[idx[r], d] over [16, 64], weight of 100 rows
  KernelBuilder b("embed", {16, 64});
  int idx = b.load(b.input(ST::I64, {1, 0}), ST::I64);
  int weight = b.input(ST::F32, {0, 1});
  int checked = b.expr(ExprOp::CheckIndex, ST::I64, {idx, b.constant(100, ST::I64)});
  int row = b.expr(ExprOp::Minimum, ST::I64,
                   {b.expr(ExprOp::Maximum, ST::I64, {checked, b.constant(0, ST::I64)}),
                    b.constant(99, ST::I64)});
  int off = b.expr(ExprOp::Mul, ST::I64, {row, b.constant(64, ST::I64)});
  int g = b.expr(ExprOp::Gather, ST::F32, {off});
  b.k.exprs[g].buffer = weight;
  b.output(g, ST::F32, b.contiguous());
  b.k.verify();
  CHECK(b.k.str().find("check_index(%0, %") != std::string::npos);
  CudaKernel ck = emit(b.k);
  CHECK(ck.source.find("tl_check_index(") != std::string::npos);
  REQUIRE_NVRTC_OR_SKIP();
  CHECK(compile(ck).find("__assertfail") != std::string::npos);
  b.k.exprs[checked].type = ST::I32;
  CHECK_THROWS_WITH(b.k.verify(), Catch::Contains("check_index is not on i64"));
}

namespace {
// stack([x0, x1, x2], dim=1) over [4, 3, 64]: where(i == 0, x0, where(i == 1, x1, x2)) with
// each part's producer (x * 2) fused; `checked` puts an index check into part 1's operand.
ir::Kernel stack_of_three(bool checked) {
  KernelBuilder b("stack3", {4, 3, 64});
  int idx = b.expr(ExprOp::Index, ST::I64, {});
  b.k.exprs[idx].ivalue = 1;
  std::vector<int> parts;
  for (int p = 0; p < 3; ++p) {
    int x = b.load(b.input(ST::F32, {64, 0, 1}), ST::F32);
    parts.push_back(b.expr(ExprOp::Mul, ST::F32, {x, b.constant(2, ST::F32)}));
  }
  if (checked) {
    int bound = b.expr(ExprOp::CheckIndex, ST::I64, {idx, b.constant(3, ST::I64)});
    parts[1] = b.expr(ExprOp::Add, ST::F32, {parts[1], b.expr(ExprOp::Cast, ST::F32, {bound})});
  }
  auto is = [&](int k) { return b.expr(ExprOp::Eq, ST::Bool, {idx, b.constant(k, ST::I64)}); };
  int inner = b.expr(ExprOp::Where, ST::F32, {is(1), parts[1], parts[2]});
  b.output(b.expr(ExprOp::Where, ST::F32, {is(0), parts[0], inner}), ST::F32, b.contiguous());
  b.k.verify();
  return b.k;
}
}  // namespace

TEST_CASE("a where over parts that read memory reads only the chosen part", "[codegen][cuda]") {
  CudaKernel ck = emit(stack_of_three(false));
  INFO(ck.source);
  // The scalar entry: per point an if/else per Where, each part loaded in its branch.
  CHECK(count(ck.source, "else {") >= 2);
  REQUIRE_NVRTC_OR_SKIP();
  compile(ck);
}

TEST_CASE("a where whose discarded part checks an index computes both parts", "[codegen][cuda]") {
  // NOTE: torch's kernel asserts on a bad index also where the value is discarded
  CudaKernel ck = emit(stack_of_three(true));
  INFO(ck.source);
  CHECK(ck.source.find("else {") == std::string::npos);
  CHECK(ck.source.find("tl_check_index(") != std::string::npos);
  REQUIRE_NVRTC_OR_SKIP();
  compile(ck);
}

TEST_CASE("sizes past 2^31 elements switch to 64-bit indices", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  KernelBuilder b("big", {int64_t{3} << 30});
  int x = b.load(b.input(ST::U8, {1}), ST::U8);
  b.output(x, ST::U8, {1});
  CudaKernel ck = emit(b.k);
  CHECK(ck.source.find("unsigned long long i") != std::string::npos);
  compile(ck);
}

TEST_CASE("a broken source is a Value error carrying NVRTC's log", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  try {
    nvrtc_compile("extern \"C\" __global__ void broken() { undeclared_thing(); }", "broken",
                  "compute_90");
    FAIL("no error");
  } catch (const tl::Error& e) {
    std::string msg = e.what();
    CHECK(e.kind() == tl::ErrorKind::Value);
    CHECK(msg.find("kernel broken") != std::string::npos);
    CHECK(msg.find("undeclared_thing") != std::string::npos);  // NVRTC's log
    CHECK(msg.find("   1  extern") != std::string::npos);      // the numbered source
  }
}

TEST_CASE("NVRTC reports its version and builds a cubin for sm_90", "[codegen][cuda]") {
  REQUIRE_NVRTC_OR_SKIP();
  CHECK(tl::runtime::cuda::nvrtc_version().major >= 11);
  std::string cubin =
      nvrtc_compile("extern \"C\" __global__ void k(float* p) { p[0] = 1; }", "k", "sm_90");
  REQUIRE(cubin.size() > 4);
  CHECK(cubin.substr(0, 4) ==
        "\x7f"
        "ELF");
}

namespace {

// (x * 2 + 1).relu() - sigmoid(x) over a contiguous [a, b, c], runtime sizes on or off.
ir::Kernel sized_pointwise(int64_t a, int64_t b, int64_t c, bool runtime) {
  KernelBuilder kb("sized_pw", {a, b, c});
  kb.k.runtime_sizes = runtime;
  int x = kb.load(kb.input(ST::F32, kb.contiguous()), ST::F32);
  int y = kb.expr(
      ExprOp::Add, ST::F32,
      {kb.expr(ExprOp::Mul, ST::F32, {x, kb.constant(2, ST::F32)}), kb.constant(1, ST::F32)});
  int z = kb.expr(ExprOp::Sub, ST::F32,
                  {kb.expr(ExprOp::Relu, ST::F32, {y}), kb.expr(ExprOp::Sigmoid, ST::F32, {x})});
  kb.output(z, ST::F32, kb.contiguous());
  return kb.k;
}

// softmax over the rows of a contiguous [rows, len] with runtime sizes.
ir::Kernel sized_softmax(int64_t rows, int64_t len) {
  KernelBuilder kb("sized_softmax", {rows, len}, 1);
  kb.k.runtime_sizes = true;
  int x = kb.load(kb.input(ST::F32, {len, 1}), ST::F32);
  int mx = kb.expr(ExprOp::ReduceMax, ST::F32, {x});
  int e = kb.expr(ExprOp::Exp, ST::F32, {kb.expr(ExprOp::Sub, ST::F32, {x, mx})});
  int s = kb.expr(ExprOp::ReduceSum, ST::F32, {e});
  kb.output(kb.expr(ExprOp::Div, ST::F32, {e, s}), ST::F32, {len, 1});
  return kb.k;
}

}  // namespace

TEST_CASE("pointwise kernels with runtime sizes have one text for every size", "[codegen][cuda]") {
  // Odd lengths and numels that are not whole 16-byte packs: the same text, each size's dims.
  const std::vector<std::vector<int64_t>> sizes = {
      {3, 37, 16}, {3, 101, 16}, {7, 5, 9}, {2, 13, 9}};
  std::vector<CudaKernel> ks;
  for (const auto& s : sizes) ks.push_back(emit(sized_pointwise(s[0], s[1], s[2], true)));
  for (size_t i = 0; i < ks.size(); ++i) {
    INFO(ks[i].source);
    CHECK(ks[i].source == ks[0].source);
    CHECK(ks[i].vector_name == ks[0].vector_name);
    CHECK(ks[i].dim_bytes == 4);
    const int64_t numel = sizes[i][0] * sizes[i][1] * sizes[i][2];
    REQUIRE(!ks[i].dims.empty());
    CHECK(ks[i].dims[0] == numel);  // the first number the text reads: the loop's end
    // No size of its own in the text: it reads them from its dims parameter.
    if (numel >= 1000) CHECK(ks[i].source.find(std::to_string(numel)) == std::string::npos);
    CHECK(ks[i].source.find("const tl_dims<unsigned, " + std::to_string(ks[i].dims.size()) +
                            "> tl_d)") != std::string::npos);
  }
  CHECK(ks[0].dims != ks[1].dims);
  CHECK(ks[0].grid < ks[1].grid);  // the launch shape is each size's own
  // Static kernels keep their numbers in the text and take no dims.
  CudaKernel a = emit(sized_pointwise(3, 37, 16, false)),
             b = emit(sized_pointwise(3, 101, 16, false));
  CHECK(a.source != b.source);
  CHECK(a.dims.empty());
  CHECK(a.source.find("tl_d.v[") == std::string::npos);
  REQUIRE_NVRTC_OR_SKIP();
  compile(ks[0]);
}

TEST_CASE("reductions with runtime sizes share a text across row counts, 64-bit when needed",
          "[codegen][cuda]") {
  // Row counts that are and are not multiples of a warp's rows: one text (the row guard is
  // always written with runtime sizes).
  CudaKernel first = emit(sized_softmax(37, 128));
  for (int64_t rows : {64, 129, 1000, 3}) {
    CudaKernel ck = emit(sized_softmax(rows, 128));
    INFO(ck.source);
    CHECK(ck.source == first.source);
    REQUIRE(!ck.dims.empty());
    CHECK(std::find(ck.dims.begin(), ck.dims.end(), rows) != ck.dims.end());
  }
  // Rows of another length change the text where the code generator decides from it.
  CudaKernel shorter = emit(sized_softmax(37, 20));
  CHECK(shorter.source != first.source);
  // Past 2^31 elements: 64-bit indices and 64-bit dims (another text).
  CudaKernel big = emit(sized_softmax(int64_t{1} << 24, 128));
  CHECK(big.dim_bytes == 8);
  CHECK(big.source.find("tl_dims<unsigned long long, ") != std::string::npos);
  CHECK(first.dim_bytes == 4);
  REQUIRE_NVRTC_OR_SKIP();
  compile(first);
  compile(big);
  compile(emit(sized_softmax(1000, 4096)));  // block rows, row cache
}

TEST_CASE("gathers and coordinates with runtime sizes share a text across row counts",
          "[codegen][cuda]") {
  // An embedding row gather over [rows, 64] and a stack (coordinates) over [rows, 3, 64].
  auto embed = [](int64_t rows) {
    KernelBuilder b("embed_rt", {rows, 64});
    b.k.runtime_sizes = true;
    int idx = b.load(b.input(ST::I64, {1, 0}), ST::I64);
    int weight = b.input(ST::F32, {0, 1});
    int off = b.expr(ExprOp::Mul, ST::I64, {idx, b.constant(64, ST::I64)});
    int g = b.expr(ExprOp::Gather, ST::F32, {off});
    b.k.exprs[g].buffer = weight;
    b.output(g, ST::F32, b.contiguous());
    return emit(b.k);
  };
  auto stack = [](int64_t rows) {
    ir::Kernel k = stack_of_three(false);
    k.shape[0] = rows;
    for (auto& in : k.inputs) in.strides = {64, 0, 1};
    k.outputs[0].view.strides = {3 * 64, 64, 1};
    k.runtime_sizes = true;
    return emit(k);
  };
  CudaKernel e16 = embed(16), e37 = embed(37), s4 = stack(4), s101 = stack(101);
  CHECK(e16.source == e37.source);
  CHECK(e16.dims != e37.dims);
  CHECK(s4.source == s101.source);
  CHECK(s4.dims != s101.dims);
  REQUIRE_NVRTC_OR_SKIP();
  compile(e37);
  compile(s101);
}
