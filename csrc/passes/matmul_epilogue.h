#pragma once
// The equivalent forms of a matrix product with a bias (F.linear, torch.addmm) and the
// activation after it, among which mode="max-autotune" picks by timing
// (pipeline/matmul_epilogues.h). What each form is:
//   - Addmm (the graph as captured; without autotune): the bias added inside the call (cuBLASLt's
//     bias epilogue), the activation in the generated kernel that reads the product;
//   - BiasInKernel: the product without bias (a plain GEMM: cuBLAS can pick other algorithms)
//     and the bias added by the generated kernel that reads it, as Inductor does. Offered only
//     where every reader of the product (through reshapes) is a pointwise op of ours, so the add
//     fuses there and costs no pass over the product, or the graph's output (a training
//     forward's pre-activation saved for backward: that kernel also writes the sum);
//   - Activation: torch._addmm_activation, bias and ReLU or tanh-GELU in cuBLASLt's epilogue
//     (torch falls back to addmm + the activation in place where cuBLASLt does not apply). Offered
//     only where the activation (relu, gelu(approximate='tanh') or that GELU written out as
//     GPT-2 does: what cuBLASLt computes) is the product's one reader, through reshapes of
//     contiguous values; a GELU only on CUDA (torch's
//     CPU kernel computes the exact one).
// This file finds the sites and rewrites them; it times nothing.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tl::passes {

enum class EpilogueForm { Addmm, BiasInKernel, Activation };

struct EpilogueSite {
  ir::Node* product = nullptr;  // torch._C._nn.linear / torch.nn.functional.linear / torch.addmm
  bool linear = false;          // linear: weight [N, K]; addmm: mat2 [K, N]
  const ir::Node* input = nullptr;  // linear's input (any leading dims) or addmm's mat1
  const ir::Node* weight = nullptr;
  const ir::Node* bias = nullptr;  // 1-d, N
  int64_t m = 0, k = 0, n = 0;
  std::vector<ir::Node*> reshapes;  // between the product and the activation, in order
  ir::Node* activation = nullptr;   // relu or tanh-GELU, the product's one reader; or null
  bool gelu = false;
  // A tanh GELU written out as pointwise ops (GPT-2's `0.5 * x * (1 + tanh(sqrt(2 / pi) *
  // (x + 0.044715 * x ** 3)))`): `activation` is its last op, these the others, in the order
  // they can be erased after it.
  std::vector<ir::Node*> formula;
  // With an activation: nothing of ours reads its result (extern calls, the graph output), so
  // under Activation its kernel goes away (under the other forms it runs alone).
  bool activation_alone = false;
  // The product (or a reshape of it) is also a graph output: a training forward's
  // pre-activation, saved for backward (which recomputes the activation from it). Under
  // BiasInKernel the kernel that adds the bias writes it too (one more pass over M x N); no
  // Activation form then (cuBLASLt's result is the activation's, not the saved value).
  bool product_out = false;
  std::vector<EpilogueForm> forms;  // Addmm first; at least one other
};

// The sites of `g` with at least one form besides Addmm: floating products (f32, f16, bf16)
// of one dtype, not requiring grad (a training graph's halves: their values never do), with a
// 1-d bias of N elements.
std::vector<EpilogueSite> find_matmul_epilogues(const ir::Graph& g);

// Rewrites `site` into `form` (Addmm: nothing). Returns false and leaves the graph as it was
// when the new nodes' layouts would differ from what the readers were traced against.
bool apply_matmul_epilogue(ir::Graph& g, const EpilogueSite& site, EpilogueForm form);

// "addmm", "mm+bias", "addmm_activation(relu)" / "addmm_activation(gelu)": trial labels.
std::string form_label(const EpilogueSite& site, EpilogueForm form);

}  // namespace tl::passes
