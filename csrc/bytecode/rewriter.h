#pragma once
// The original code of a frame, lifted to labelled instructions, with its
// fast locals renumbered so that generated parameters come first: the common
// base of bridges, resume functions and loop-body functions (resume.h).
// Internal to bytecode/.
#include <Python.h>
#include <opcode.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/assembler.h"
#include "bytecode/decode.h"
#include "bytecode/opcode_tables.h"
#include "bytecode/resume.h"
#include "core/errors.h"
#include "core/py_ref.h"

namespace tl::bytecode {

// Labels of generated instructions start here; original instructions keep
// their indices as labels.
constexpr int kFirstNewLabel = 1 << 24;

// NOTE: 3.13 pushes a call's NULL (or self) after the callable; 3.11/3.12 before it.
constexpr bool kNullAboveCallable = PY_VERSION_HEX >= 0x030D0000;

// Drops a NULL on top of the stack: only CALL consumes one, so call int()
// with it (3.13: as its self_or_null slot) and pop the 0 it returns.
inline void drop_null(std::vector<Instr>& out, int int_const, int line);

#ifdef POP_JUMP_FORWARD_IF_TRUE
constexpr int kPopJumpIfTrue = POP_JUMP_FORWARD_IF_TRUE;
#else
constexpr int kPopJumpIfTrue = POP_JUMP_IF_TRUE;  // 3.12: forward only
#endif

inline std::string utf8(PyObject* s) {  // borrows s
  const char* c = PyUnicode_AsUTF8(s);
  if (!c) throw PythonError();
  return c;
}

inline PyRef checked(PyObject* p) {  // steals p
  if (!p) throw PythonError();
  return PyRef::steal(p);
}

// The original code, lifted, and a renumbering of its fast locals: the new
// parameters come first (passed locals in their original order, then
// `extra_params`), then the other original locals, then `extra_locals`.
class Rewriter {
 public:
  static constexpr unsigned char kFastCell = 0x40;
  static constexpr unsigned char kFastFree = 0x80;

  explicit Rewriter(PyCodeObject* code)
      : code_(code), bc_(decode(code)), asm_(lift(bc_)), spec_(spec_of(code)) {
    nlocals_ = code->co_nlocals;
    const char* kinds = PyBytes_AS_STRING(code->co_localspluskinds);
    int nfree_original = 0;
    for (int i = 0; i < code->co_nlocalsplus; ++i) {
      if (kinds[i] & kFastCell) cells_.push_back(i);
      if (kinds[i] & kFastFree) ++nfree_original;
    }
    first_free_ = code->co_nlocalsplus - nfree_original;
    // NOTE: the frame's cells become free variables of the generated code, ahead of its own
    // free variables: the caller passes the cell objects in the closure, so functions made
    // before the break (holding those cells) and the code after it share every later write.
    nfree_ = static_cast<int>(cells_.size()) + nfree_original;
    PyRef names = checked(PyCode_GetVarnames(code));
    for (int i = 0; i < nlocals_; ++i) names_.push_back(utf8(PyTuple_GET_ITEM(names.get(), i)));
    {
      PyRef freevars = checked(PyTuple_New(nfree_));
      int j = 0;
      for (int s : cells_)
        PyTuple_SET_ITEM(freevars.get(), j++,
                         Py_NewRef(PyTuple_GET_ITEM(code->co_localsplusnames, s)));
      for (int s = first_free_; s < code->co_nlocalsplus; ++s)
        PyTuple_SET_ITEM(freevars.get(), j++,
                         Py_NewRef(PyTuple_GET_ITEM(code->co_localsplusnames, s)));
      spec_.freevars = freevars;
      spec_.cellvars = checked(PyTuple_New(0));
    }
    // A resume function's own arguments are locals of the code built from
    // it: new names get a prefix no original local has.
    for (int level = 0;; ++level) {
      prefix_ = "___" + std::to_string(level) + "_";
      if (std::none_of(names_.begin(), names_.end(),
                       [&](const std::string& n) { return n.rfind(prefix_, 0) == 0; }))
        break;
    }
  }

  // The name of a local the generated code adds ("stack0" -> "___0_stack0").
  std::string fresh(const std::string& base) const { return prefix_ + base; }

  const Bytecode& bytecode() const { return bc_; }
  PyCodeObject* code() const { return code_; }
  int size() const { return static_cast<int>(bc_.insts.size()); }
  int line_near(int index) const {
    for (int i = index; i >= 0; --i)
      if (bc_.insts[i].line >= 0) return bc_.insts[i].line;
    return code_->co_firstlineno;
  }

  void renumber(const std::vector<int>& passed, const std::vector<std::string>& extra_params,
                const std::vector<std::string>& extra_locals) {
    std::vector<bool> is_passed(nlocals_, false);
    old_to_new_.assign(nlocals_, -1);
    varnames_.clear();
    for (int s : passed) {
      TL_CHECK(s >= 0 && s < nlocals_ && !is_cell(s))
          << "passed local " << s << " is not a plain local";
      is_passed[s] = true;
      old_to_new_[s] = static_cast<int>(varnames_.size());
      varnames_.push_back(names_[s]);
    }
    argcount_ = static_cast<int>(varnames_.size() + extra_params.size());
    for (auto& n : extra_params) varnames_.push_back(n);
    for (int s = 0; s < nlocals_; ++s) {
      if (is_passed[s] || is_cell(s)) continue;  // NOTE: an argument that is a cell is free
      old_to_new_[s] = static_cast<int>(varnames_.size());
      varnames_.push_back(names_[s]);
    }
    for (auto& n : extra_locals) varnames_.push_back(n);
  }

  int slot(const std::string& name) const {
    for (size_t i = 0; i < varnames_.size(); ++i)
      if (varnames_[i] == name) return static_cast<int>(i);
    TL_CHECK(false) << "no local " << name;
  }
  int slot_of_original(int s) const { return old_to_new_.at(s); }
  // True for a slot of the original code that is a cell (an argument one included).
  bool is_cell(int s) const { return std::binary_search(cells_.begin(), cells_.end(), s); }
  // The original code's cell slots, ascending: the first free variables of generated code.
  const std::vector<int>& cells() const { return cells_; }

  // The prologue (free variables, RESUME, the value stack from arguments),
  // then the original instructions with renumbered locals.
  std::vector<Instr> body(const std::string& stack, int entry, int line, bool iter_calls,
                          bool clear = false) const {
    std::vector<Instr> out = prologue(stack, line, iter_calls, clear);
    Instr jump = make(JUMP_FORWARD, 0, line);
    jump.target = entry;
    out.push_back(jump);
    for (const Instr& in : original()) out.push_back(in);
    return out;
  }

  // Pushes a new function running the code at co_consts[const_index] (made
  // from this code, so with the same free variables) with the frame's globals
  // and its free variables' cells as closure: what PyFunction_New plus
  // PyFunction_SetClosure give, without passing the function as an argument.
  std::vector<Instr> make_function(int const_index, int line) const {
    std::vector<Instr> out;
    const int first_free = static_cast<int>(varnames_.size());
    for (int j = 0; j < nfree_; ++j) {
#if PY_VERSION_HEX >= 0x030D0000
      out.push_back(make(LOAD_FAST, first_free + j, line));  // NOTE: 3.13: a cell, as LOAD_CLOSURE
#else
      out.push_back(make(LOAD_CLOSURE, first_free + j, line));
#endif
    }
    if (nfree_) out.push_back(make(BUILD_TUPLE, nfree_, line));
    out.push_back(make(LOAD_CONST, const_index, line));
#if PY_VERSION_HEX >= 0x030D0000
    out.push_back(make(MAKE_FUNCTION, 0, line));
    if (nfree_) out.push_back(make(SET_FUNCTION_ATTRIBUTE, 0x08, line));
#else
    out.push_back(make(MAKE_FUNCTION, nfree_ ? 0x08 : 0, line));
#endif
    return out;
  }

  // Free variables, RESUME and the value stack rebuilt from the "stack<j>"
  // parameters (Iter slots from a tuple of the items left, with `iter_calls`;
  // with `clear`, each parameter is unbound once on the stack).
  std::vector<Instr> prologue(const std::string& stack, int line, bool iter_calls,
                              bool clear = false) const {
    std::vector<Instr> out;
    if (nfree_) out.push_back(make(COPY_FREE_VARS, nfree_, line));
    out.push_back(make(RESUME, 0, line));
    int j = 0;
    for (char c : stack) {
      if (c == static_cast<char>(Slot::Null)) {
        out.push_back(make(PUSH_NULL, 0, line));
        continue;
      }
      const int param = slot(fresh("stack" + std::to_string(j++)));
      out.push_back(make(LOAD_FAST, param, line));
      if (clear) out.push_back(make(DELETE_FAST, param, line));
      if (c == static_cast<char>(Slot::Iter)) {
        TL_CHECK(iter_calls) << "iterator on a resume function's stack";
        out.push_back(make(GET_ITER, 0, line));
      }
    }
    return out;
  }

  // The original instructions (labels: their indices) with renumbered locals.
  // 3.13's two-local superinstructions come out as their two halves (the
  // renumbered slots may not fit a nibble); the second half has no label.
  std::vector<Instr> original() const {
    std::vector<Instr> out;
    for (const auto& group : original_groups()) out.insert(out.end(), group.begin(), group.end());
    return out;
  }

  // The same, one group per original instruction (two instructions for a
  // superinstruction, one otherwise), indexed like bytecode().insts.
  std::vector<std::vector<Instr>> original_groups() const {
    std::vector<std::vector<Instr>> out;
    out.reserve(asm_.insts.size());
    for (Instr in : asm_.insts) {
      unsigned f = opcode_flags(in.opcode);
      if (f & kLocalPair) {
        auto [first, second] = split_pair(in.opcode);
        Instr a = in, b = in;
        a.opcode = first, a.arg = new_fast(in.arg >> 4);
        b.opcode = second, b.arg = new_fast(in.arg & 15), b.label = kNoLabel;
        out.push_back({a, b});
        continue;
      }
      // NOTE: 3.13 loads a cell or free variable for a closure with LOAD_FAST.
      if (f & kLocal) in.arg = new_fast(in.arg);
      if (f & kFree) in.arg = new_fast(in.arg);
      out.push_back({in});
    }
    return out;
  }

  // The two instructions a 3.13 superinstruction stands for.
  static std::pair<int, int> split_pair(int opcode) {
#ifdef LOAD_FAST_LOAD_FAST
    if (opcode == LOAD_FAST_LOAD_FAST) return {LOAD_FAST, LOAD_FAST};
    if (opcode == STORE_FAST_STORE_FAST) return {STORE_FAST, STORE_FAST};
    if (opcode == STORE_FAST_LOAD_FAST) return {STORE_FAST, LOAD_FAST};
#endif
    TL_CHECK(false) << "no superinstruction: " << opcode_name(opcode);
  }

  const std::vector<ExceptionBlock>& blocks() const { return asm_.blocks; }

  // The code object, named `qualname`, with `extra_consts` appended to
  // co_consts (at consts_size() on).
  PyRef assemble_with(Assembly a, const std::string& qualname,
                      const std::vector<PyObject*>& extra_consts) const {
    CodeSpec s = spec_;
    s.argcount = argcount_;
    s.posonlyargcount = 0;
    s.kwonlyargcount = 0;
    s.flags &= ~(CO_VARARGS | CO_VARKEYWORDS);
    PyRef vn = checked(PyTuple_New(static_cast<Py_ssize_t>(varnames_.size())));
    for (size_t i = 0; i < varnames_.size(); ++i)
      PyTuple_SET_ITEM(vn.get(), i, checked(PyUnicode_FromString(varnames_[i].c_str())).release());
    s.varnames = vn;
    if (!extra_consts.empty()) {
      Py_ssize_t n = PyTuple_GET_SIZE(s.consts.get());
      PyRef consts = checked(PyTuple_New(n + static_cast<Py_ssize_t>(extra_consts.size())));
      for (Py_ssize_t i = 0; i < n; ++i)
        PyTuple_SET_ITEM(consts.get(), i, Py_NewRef(PyTuple_GET_ITEM(s.consts.get(), i)));
      for (size_t i = 0; i < extra_consts.size(); ++i)
        PyTuple_SET_ITEM(consts.get(), n + static_cast<Py_ssize_t>(i), Py_NewRef(extra_consts[i]));
      s.consts = consts;
    }
    s.qualname = checked(PyUnicode_FromString(qualname.c_str()));
    return assemble(a, s);
  }

  int consts_size() const { return static_cast<int>(PyTuple_GET_SIZE(spec_.consts.get())); }
  // The user's qualname, without what an earlier resume function added.
  std::string qualname() const {
    std::string q = utf8(code_->co_qualname);
    return q.substr(0, q.find(" ("));
  }

  static Instr make(int opcode, int arg, int line) {
    Instr in;
    in.opcode = opcode;
    in.arg = arg;
    in.line = line;
    return in;
  }

 private:
  PyCodeObject* code_;
  Bytecode bc_;
  Assembly asm_;
  CodeSpec spec_;
  int nlocals_ = 0;
  int nfree_ = 0;       // free variables of generated code: cells_, then the original's
  int first_free_ = 0;  // the original's first free-variable slot
  std::vector<int> cells_;
  int argcount_ = 0;
  std::string prefix_;
  std::vector<std::string> names_;
  std::vector<std::string> varnames_;
  std::vector<int> old_to_new_;

  // A renumbered fast-locals slot: plain locals by the table; cells, then free variables,
  // after the plain locals.
  int new_fast(int s) const {
    const int first = static_cast<int>(varnames_.size());
    auto cell = std::lower_bound(cells_.begin(), cells_.end(), s);
    if (cell != cells_.end() && *cell == s) return first + static_cast<int>(cell - cells_.begin());
    if (s < nlocals_) return old_to_new_.at(s);
    TL_CHECK(s >= first_free_) << "slot " << s << " is neither a local, a cell nor free";
    return first + static_cast<int>(cells_.size()) + (s - first_free_);
  }
};

inline void drop_null(std::vector<Instr>& out, int int_const, int line) {
  out.push_back(Rewriter::make(LOAD_CONST, int_const, line));
  if (kNullAboveCallable) out.push_back(Rewriter::make(SWAP, 2, line));
#ifdef PRECALL
  out.push_back(Rewriter::make(PRECALL, 0, line));
#endif
  out.push_back(Rewriter::make(CALL, 0, line));
}

inline std::vector<std::string> numbered(const Rewriter& rw, const char* base, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(rw.fresh(base + std::to_string(i)));
  return out;
}

inline size_t count_values(const std::string& stack) {
  size_t n = 0;
  for (char c : stack) n += c != static_cast<char>(Slot::Null);
  return n;
}

}  // namespace tl::bytecode
