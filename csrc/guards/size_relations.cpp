#include "guards/size_relations.h"

#include <sstream>
#include <utility>

namespace tl::guards {

SizeRelations::SizeRelations(std::vector<Symbol> symbols, std::vector<ir::SymRelation> relations)
    : symbols_(std::move(symbols)), relations_(std::move(relations)) {}

bool SizeRelations::holds(const std::vector<int64_t>& values) const {
  for (const ir::SymRelation& r : relations_) {
    if (r.holds(values)) continue;
    std::ostringstream os;
    os << "SIZE_RELATION: the trace relied on " << r.str() << " (" << r.where
       << "), false at these sizes: ";
    for (size_t k = 0; k < symbols_.size() && k < values.size(); ++k)
      os << (k ? ", " : "") << "s" << k << " = " << symbols_[k].source->str() << ".size("
         << symbols_[k].dim << ") = " << values[k];
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
