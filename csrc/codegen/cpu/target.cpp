#include "codegen/cpu/target.h"

#include <dlfcn.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>
#include <mutex>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/SubtargetFeature.h>

#include "core/errors.h"

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
// LLVM 19's LIBMVEC_X86 table maps only sin/cos/exp/log/pow; glibc >= 2.35
// also has vector tanh, erf, expm1, log1p... A scalar call without a vector
// variant keeps the whole loop scalar (a 6-op chain with tanh ran ~10x slower).
const std::vector<llvm::VecDesc>& extra_libmvec_functions() {
  static const auto* table = [] {
    static const char* names[] = {"tanh", "sinh", "cosh", "tan", "asin", "acos", "atan",
                                  "asinh", "acosh", "atanh", "expm1", "log1p", "log2",
                                  "log10", "exp2", "erf", "erfc", "cbrt"};
    bool avx2 = host().features.find("+avx2") != std::string::npos;
    // NOTE: VecDesc keeps StringRefs: the strings live as long as the process.
    auto* strings = new std::deque<std::string>();  // deque: push_back keeps references valid
    auto* out = new std::vector<llvm::VecDesc>();
    auto add = [&](const std::string& scalar, const std::string& isa, unsigned lanes) {
      strings->push_back(scalar);
      const std::string& sc = strings->back();
      strings->push_back("_ZGV" + isa + "N" + std::to_string(lanes) + "v_" + scalar);
      const std::string& vec = strings->back();
      strings->push_back("_ZGV_LLVM_N" + std::to_string(lanes) + "v");
      out->emplace_back(sc, vec, llvm::ElementCount::getFixed(lanes), false, strings->back());
    };
    for (const char* n : names) {
      add(std::string(n) + "f", "b", 4);
      add(n, "b", 2);
      if (avx2) {
        add(std::string(n) + "f", "d", 8);
        add(n, "d", 4);
      }
    }
    return out;
  }();
  return *table;
}
}  // namespace

const std::string& host_target_id() { return host().id; }

std::unique_ptr<llvm::TargetMachine> host_target_machine() {
  const Host& h = host();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(h.triple, err);
  if (!target) TL_THROW(Runtime) << "LLVM has no code generator for " << h.triple << ": " << err;
  llvm::TargetOptions opts;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      h.triple, h.cpu, h.features, opts, llvm::Reloc::PIC_, llvm::CodeModel::Small,
      llvm::CodeGenOptLevel::Default));
  if (!tm) TL_THROW(Runtime) << "LLVM cannot create a target machine for " << h.id;
  return tm;
}

void optimize_module(llvm::Module& m, llvm::TargetMachine& tm) {
  m.setTargetTriple(tm.getTargetTriple().str());
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
