#include "codegen/cpu/target.h"

#include <dlfcn.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/SubtargetFeature.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/flags.h"

namespace tl::codegen::cpu {

namespace {
struct Host {
  std::string triple, cpu, features, id;
  // glibc's libmvec (vector expf/logf/sinf...) when it can be loaded into the
  // process: the vectoriser then keeps loops with transcendentals vectorised.
  bool libmvec = false;
};

const Host& host() {
  static const Host h = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    Host h;
    h.triple = llvm::sys::getProcessTriple();
    h.cpu = llvm::sys::getHostCPUName().str();
    std::vector<std::string> feats;
    for (auto& kv : llvm::sys::getHostCPUFeatures()) {
      // NOTE: not "+" + str, which trips a GCC 12 -Wrestrict false positive.
      std::string f(kv.second ? "+" : "-");
      f += kv.first().str();
      feats.push_back(std::move(f));
    }
    std::sort(feats.begin(), feats.end());  // StringMap order is unspecified; keys must be stable
    llvm::SubtargetFeatures sf;
    for (auto& f : feats) sf.AddFeature(f);
    h.features = sf.getString();
    h.libmvec = llvm::Triple(h.triple).getArch() == llvm::Triple::x86_64 &&
                dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL) != nullptr;
    h.id = h.triple + "/" + h.cpu + "/" + h.features + (h.libmvec ? "/libmvec" : "");
    return h;
  }();
  return h;
}
// AVX-512 hosts: kernels prefer 512-bit vectors, where LLVM's default for
// these CPUs is 256 bits (for fear of clock throttling). Measured on the
// 2-core dev VM (bench-size 4096x4096 f32, 2 threads): softmax 7.1 against
// 9.8 ms, layer norm 4.4 against 5.2, exp 4.6 against 6.0.
// The cpu_vector_bits setting 256 keeps LLVM's choice (read once: it is part of
// the target id that keys the disk cache).
bool wide_vectors() {
  static const bool wide = [] {
    if (process_settings().cpu_vector_bits == 256) return false;
    return (host().features + ",").find("+avx512f,") != std::string::npos;
  }();
  return wide;
}

// LLVM 19's LIBMVEC_X86 table maps only sin/cos/exp/log/pow, and only up to
// 256 bits; glibc >= 2.35 also has vector tanh, erf, expm1, log1p... and
// 512-bit variants of all. A scalar call without a vector variant keeps the
// whole loop scalar (a 6-op chain with tanh ran ~10x slower).
const std::vector<llvm::VecDesc>& extra_libmvec_functions() {
  static const auto* table = [] {
    static const char* names[] = {"tanh", "sinh",  "cosh",  "tan",   "asin",  "acos",
                                  "atan", "asinh", "acosh", "atanh", "expm1", "log1p",
                                  "log2", "log10", "exp2",  "erf",   "erfc",  "cbrt"};
    static const char* in_llvm_table[] = {"sin", "cos", "exp", "log", "pow"};
    bool avx2 = host().features.find("+avx2") != std::string::npos;
    bool avx512 = wide_vectors();
    // NOTE: VecDesc keeps StringRefs: the strings live as long as the process.
    auto* strings = new std::deque<std::string>();  // deque: push_back keeps references valid
    auto* out = new std::vector<llvm::VecDesc>();
    // `from` (a libm name or an intrinsic) -> libmvec's `isa` variant of `scalar`, which
    // takes `args` vectors.
    auto add_as = [&](const std::string& from, const std::string& scalar, const std::string& isa,
                      unsigned lanes, int args = 1) {
      std::string params(args, 'v');
      strings->push_back(from);
      const std::string& sc = strings->back();
      strings->push_back("_ZGV" + isa + "N" + std::to_string(lanes) + params + "_" + scalar);
      const std::string& vec = strings->back();
      strings->push_back("_ZGV_LLVM_N" + std::to_string(lanes) + params);
      out->emplace_back(sc, vec, llvm::ElementCount::getFixed(lanes), false, strings->back());
    };
    auto add = [&](const std::string& scalar, const std::string& isa, unsigned lanes) {
      add_as(scalar, scalar, isa, lanes);
    };
    for (const char* n : names) {
      add(std::string(n) + "f", "b", 4);
      add(n, "b", 2);
      if (avx2) {
        add(std::string(n) + "f", "d", 8);
        add(n, "d", 4);
      }
      if (avx512) {
        add(std::string(n) + "f", "e", 16);
        add(n, "e", 8);
      }
    }
    if (avx512) {
      for (const char* n : in_llvm_table) {
        int args = std::string(n) == "pow" ? 2 : 1;
        for (const std::string& from : {std::string(n), "llvm." + std::string(n) + ".f64"})
          add_as(from, n, "e", 8, args);
        for (const std::string& from : {std::string(n) + "f", "llvm." + std::string(n) + ".f32"})
          add_as(from, std::string(n) + "f", "e", 16, args);
      }
    }
    return out;
  }();
  return *table;
}
}  // namespace

const std::string& host_target_id() {
  static const std::string id = host().id + (wide_vectors() ? "/v512" : "");
  return id;
}

std::unique_ptr<llvm::TargetMachine> host_target_machine() {
  const Host& h = host();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(h.triple, err);
  if (!target) TL_THROW(Runtime) << "LLVM has no code generator for " << h.triple << ": " << err;
  llvm::TargetOptions opts;
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(h.triple, h.cpu, h.features, opts, llvm::Reloc::PIC_,
                                  llvm::CodeModel::Small, llvm::CodeGenOptLevel::Default));
  if (!tm) TL_THROW(Runtime) << "LLVM cannot create a target machine for " << h.id;
  return tm;
}

void optimize_module(llvm::Module& m, llvm::TargetMachine& tm) {
  m.setTargetTriple(tm.getTargetTriple().str());
  if (wide_vectors())
    for (llvm::Function& f : m)
      if (!f.isDeclaration()) f.addFnAttr("prefer-vector-width", "512");
  m.setDataLayout(tm.createDataLayout());
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  llvm::PassBuilder pb(&tm, pto);
  llvm::TargetLibraryInfoImpl tlii(tm.getTargetTriple());
  if (host().libmvec) {
    tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                            tm.getTargetTriple());
    tlii.addVectorizableFunctions(extra_libmvec_functions());
  }
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  mpm.run(m, mam);
}

llvm::SmallVector<char, 0> emit_object(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    TL_THROW(Runtime) << "LLVM cannot emit object code for " << host().id;
  pm.run(m);
  return buf;
}

}  // namespace tl::codegen::cpu
