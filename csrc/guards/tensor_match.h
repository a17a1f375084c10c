#pragma once
// TENSOR_MATCH: exact Python type, dtype, device, requires_grad, rank, sizes
// and strides of a real tensor, read through the C-API (no libtorch).
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/py_ref.h"

namespace tl::guards {

class TensorMatch {
 public:
  explicit TensorMatch(PyObject* tensor);  // borrows; records its properties now

  // A dimension whose size may change (a size-generic entry, frame/size_generic.h): any size
  // in [min, max] (max < 0: no bound) passes; min is at least 2 (0 and 1 stay exact).
  struct DynamicDim {
    int dim = 0;
    int64_t min = 2, max = -1;
  };
  // This guard with `dims` dynamic: their sizes are checked against the ranges, the other
  // sizes exactly, and the strides must be the contiguous strides of the tensor's sizes.
  // Call only on a guard whose recorded strides are contiguous.
  TensorMatch with_dynamic_dims(std::vector<DynamicDim> dims) const;
  bool is_dynamic() const { return !dynamic_.empty(); }
  // This guard with every dimension of size >= `min_size` dynamic (sizes from `min_size` up, no
  // upper bound); itself when its recorded strides are not contiguous or no dimension qualifies.
  // `any_strides`: for a tensor no op of the entry reads (its layout decides nothing), any
  // strides pass, and a non-contiguous one relaxes too.
  TensorMatch with_all_sizes_dynamic(int64_t min_size = 2, bool any_strides = false) const;

  // Borrows v. A tensor whose metadata cannot be read fails (error cleared).
  bool check(PyObject* v) const;
  // After check(v) failed: "size mismatch at dim 0: expected 8, got 16".
  std::string mismatch(PyObject* v) const;
  // "f32[8,4] stride=(4,1) cpu requires_grad=False"
  std::string str() const;
  bool same_as(const TensorMatch& o) const;
  // v.shape (a tuple) through the getter found at add time: what SIZE_RELATION guards read
  // after check(v) passed. Null, with no error set, when it cannot be read.
  PyRef shape_of(PyObject* v) const;

 private:
  enum Field { kDtype, kDevice, kRequiresGrad, kShape, kIsCpu, kLayout, kVersion, kNumFields };
  std::string first_difference(PyObject* v) const;  // throws PythonError
  PyRef read(PyObject* v, Field f) const;           // new reference; throws on error
  PyRef read_strides(PyObject* v) const;            // new reference (a tuple); throws on error
  bool read_inference(PyObject* v) const;           // v.is_inference(); never raises
  bool fast_valid() const {
    return fast_tag_ != 0 &&
           reinterpret_cast<PyTypeObject*>(type_.get())->tp_version_tag == fast_tag_;
  }

  PyRef type_, dtype_, device_;
  bool cpu_ = false;
  bool requires_grad_ = false;
  // An inference tensor: a trace over one (no version counter, no autograd, in-place
  // updates refused outside inference mode) is not valid for a normal one, nor back.
  bool inference_ = false;
  PyRef layout_;               // torch.strided, ...
  bool check_layout_ = false;  // see the constructor
  std::vector<Py_ssize_t> sizes_, strides_;
  std::vector<DynamicDim> dynamic_;  // empty: sizes and strides exactly as recorded
  bool any_strides_ = false;         // with dynamic_: strides not checked
  std::string dynamic_difference(const std::vector<Py_ssize_t>& sizes,
                                 const std::vector<Py_ssize_t>& strides) const;
  // The C getters and stride method `type_` resolves to at add time: calling
  // them directly skips attribute lookup (~2x faster). Valid while the type's
  // version tag is unchanged, i.e. nobody patched torch.Tensor since.
  unsigned int fast_tag_ = 0;
  PyGetSetDef* getters_[kNumFields] = {};
  PyRef stride_method_;
  PyRef is_inference_method_;  // Tensor.is_inference, when a method descriptor (else null)
  // torch's own tensor check (torch._C._dynamo.guards.TensorGuards(tensor).check, bound): one
  // C++ call comparing type, dispatch keys, dtype, device, requires_grad, sizes and strides
  // against the tensor recorded, where the reads above make six Python objects (a torch.Size, a
  // stride tuple through the argument parser, a device). Only a shortcut: it is at least as
  // strict as check() (an inference tensor or another layout has other dispatch keys), so a
  // True passes and a False is decided by the reads. Null: static guards only, when this torch
  // has none, or after kMaxFastMisses Falses the reads passed (the dispatch keys it saw at
  // trace time differ from the calls': a mode's, autocast's).
  mutable PyRef fast_check_;
  mutable int fast_misses_ = 0;
  static constexpr int kMaxFastMisses = 8;
  bool check_by_reads(PyObject* v) const;
};

}  // namespace tl::guards
