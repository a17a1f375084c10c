#include "guards/size_relations.h"

#include <Python.h>

#include <sstream>
#include <utility>

namespace tl::guards {

SizeRelations::SizeRelations(std::vector<Symbol> symbols, std::vector<ir::SymRelation> relations)
    : symbols_(std::move(symbols)), relations_(std::move(relations)) {
  for (const Symbol& s : symbols_) fetchers_.emplace_back(*s.source);
  values_.resize(symbols_.size());
}

bool SizeRelations::check(const ir::FrameView& frame) const {
  for (size_t k = 0; k < symbols_.size(); ++k) {
    PyRef t = fetchers_[k](frame);
    // NOTE: `shape` is a torch.Size (a tuple subclass); TENSOR_MATCH already checked the rank.
    PyRef shape = t ? PyRef::steal(PyObject_GetAttrString(t.get(), "shape")) : PyRef();
    if (!shape || !PyTuple_Check(shape.get()) || symbols_[k].dim >= PyTuple_GET_SIZE(shape.get())) {
      PyErr_Clear();
      failure_ = "SIZE_RELATION: " + symbols_[k].source->str() + " has no size " +
                 std::to_string(symbols_[k].dim);
      return false;
    }
    values_[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), symbols_[k].dim));
    if (values_[k] == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      failure_ = "SIZE_RELATION: unreadable size of " + symbols_[k].source->str();
      return false;
    }
  }
  for (const ir::SymRelation& r : relations_) {
    if (r.holds(values_)) continue;
    std::ostringstream os;
    os << "SIZE_RELATION: the trace relied on " << r.str() << " (" << r.where
       << "), false at these sizes: ";
    for (size_t k = 0; k < symbols_.size(); ++k)
      os << (k ? ", " : "") << "s" << k << " = " << symbols_[k].source->str() << ".size("
         << symbols_[k].dim << ") = " << values_[k];
    failure_ = os.str();
    return false;
  }
  return true;
}

std::string SizeRelations::names() const {
  std::string out;
  for (size_t k = 0; k < symbols_.size(); ++k)
    out += (k ? ", s" : "s") + std::to_string(k) + " = " + symbols_[k].source->str() + ".size(" +
           std::to_string(symbols_[k].dim) + ")";
  return out;
}

std::string SizeRelations::str() const {
  std::string out;
  for (const ir::SymRelation& r : relations_)
    out += "SIZE_RELATION " + r.str() + "  # " + r.where + "; " + names() + "\n";
  return out;
}

}  // namespace tl::guards
