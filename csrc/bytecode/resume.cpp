// Bridges and resume functions (see resume.h). Both are the original
// instruction list, lifted to labels, with renumbered fast locals, a
// prologue that rebuilds the value stack from arguments and jumps to the
// break, and (bridge only) call stubs appended after the last original
// instruction, so that no exception-table range covers them: an exception
// leaving a resume function must not run a with-block's __exit__ twice.
#include "bytecode/resume.h"

#include <opcode.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "bytecode/assembler.h"
#include "capture/bytecode.h"
#include "capture/opcode_tables.h"
#include "core/errors.h"

namespace tl::bytecode {
namespace {

constexpr int kFirstNewLabel = 1 << 24;
constexpr unsigned char kFastCell = 0x40;
constexpr unsigned char kFastFree = 0x80;

std::string utf8(PyObject* s) {
  const char* c = PyUnicode_AsUTF8(s);
  if (!c) throw PythonError();
  return c;
}

PyRef checked(PyObject* p) {  // steals p
  if (!p) throw PythonError();
  return PyRef::steal(p);
}

// The breaking instruction's stack effect: `pops` values, then `pushes`
// (Slot chars); `jump_pops` on the taken branch of a conditional jump.
struct Effect {
  int pops = 0;
  std::string pushes;
  bool falls = true;
  bool jumps = false;
  int jump_pops = 0;
};

Effect effect_of(const capture::Instruction& in) {
  const int a = in.arg;
  auto v = [](int n) { return std::string(n, 'V'); };
  switch (in.opcode) {
    case CALL:
      return {a + 2, v(1)};
    case CALL_FUNCTION_EX:
      return {3 + (a & 1), v(1)};
    case BINARY_OP:
    case COMPARE_OP:
    case BINARY_SUBSCR:
    case CONTAINS_OP:
    case IS_OP:
    case IMPORT_NAME:
      return {2, v(1)};
    case UNARY_NEGATIVE:
    case UNARY_INVERT:
    case UNARY_NOT:
#ifdef UNARY_POSITIVE
    case UNARY_POSITIVE:
#endif
#ifdef CALL_INTRINSIC_1
    case CALL_INTRINSIC_1:
#endif
      return {1, v(1)};
    case LOAD_ATTR:
#if PY_VERSION_HEX >= 0x030C0000
      // NOTE: a method lookup pushes (function, self) or (NULL, attribute):
      // which one is only known when it runs, so no stub can follow it.
      if (a & 1) throw CannotResume("break at a method lookup");
#endif
      return {1, v(1)};
    case LOAD_GLOBAL:
      return {0, (a & 1) ? "NV" : "V"};
    case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
    case LOAD_FAST_CHECK:
#endif
    case LOAD_DEREF:
    case LOAD_ASSERTION_ERROR:
    case IMPORT_FROM:
      return {0, v(1)};
    case GET_LEN:
      return {0, v(1)};
    case STORE_ATTR:
    case DELETE_SUBSCR:
      return {2, ""};
    case STORE_SUBSCR:
      return {3, ""};
    case STORE_GLOBAL:
    case DELETE_ATTR:
      return {1, ""};
    case BUILD_TUPLE:
    case BUILD_LIST:
    case BUILD_SET:
    case BUILD_STRING:
    case BUILD_SLICE:
      return {a, v(1)};
    case BUILD_MAP:
      return {2 * a, v(1)};
    case BUILD_CONST_KEY_MAP:
      return {a + 1, v(1)};
    case LIST_APPEND:
    case SET_ADD:
    case LIST_EXTEND:
    case SET_UPDATE:
    case DICT_UPDATE:
    case DICT_MERGE:
      return {1, ""};
    case MAP_ADD:
      return {2, ""};
    case UNPACK_SEQUENCE:
      return {1, v(a)};
    case UNPACK_EX:
      return {1, v((a & 0xFF) + (a >> 8) + 1)};
    case FORMAT_VALUE:
      return {(a & 0x04) ? 2 : 1, v(1)};
    case BEFORE_WITH:
      return {1, v(2)};
#ifdef BINARY_SLICE
    case BINARY_SLICE:
      return {3, v(1)};
    case STORE_SLICE:
      return {4, ""};
#endif
    case RETURN_VALUE:
      return {1, "", false};
    case RAISE_VARARGS:
      return {a, "", false};
#ifdef RETURN_CONST
    case RETURN_CONST:
      return {0, "", false};
#endif
#ifdef POP_JUMP_FORWARD_IF_TRUE
    case POP_JUMP_FORWARD_IF_TRUE:
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_FORWARD_IF_NONE:
    case POP_JUMP_FORWARD_IF_NOT_NONE:
      return {1, "", true, true, 1};
    case JUMP_IF_TRUE_OR_POP:
    case JUMP_IF_FALSE_OR_POP:
      return {1, "", true, true, 0};
#else
    case POP_JUMP_IF_TRUE:
    case POP_JUMP_IF_FALSE:
    case POP_JUMP_IF_NONE:
    case POP_JUMP_IF_NOT_NONE:
      return {1, "", true, true, 1};
#endif
    default:
      throw CannotResume(std::string("no resume function after ") +
                         capture::opcode_name(in.opcode));
  }
}

struct Registry {
  std::map<std::string, std::unique_ptr<BridgeCode>> bridges;
  std::map<std::string, PyRef> resumes;
  std::set<PyCodeObject*> bridge_codes;
  std::unordered_map<PyCodeObject*, std::vector<std::pair<int, bool>>> exits;
  // NOTE: keys hold code addresses; keeping the codes alive keeps them unique.
  std::set<PyCodeObject*> kept;
  std::vector<PyRef> keep_alive;

  void keep(PyCodeObject* code) {
    if (kept.insert(code).second)
      keep_alive.push_back(PyRef::borrow(reinterpret_cast<PyObject*>(code)));
  }
};

Registry& registry() {
  static Registry* r = new Registry();  // NOTE: never destroyed (would decref after finalize)
  return *r;
}

std::string key_of(PyCodeObject* code, int index, const std::string& stack,
                   const std::vector<int>& locals, bool region) {
  std::string k = std::to_string(reinterpret_cast<uintptr_t>(code)) + ":" + std::to_string(index) +
                  ":" + stack + ":" + (region ? "r" : "") + ":";
  for (int l : locals) k += std::to_string(l) + ",";
  return k;
}

// The original code, lifted, and a renumbering of its fast locals: the new
// parameters come first (passed locals in their original order, then
// `extra_params`), then the other original locals, then `extra_locals`.
class Rewriter {
 public:
  explicit Rewriter(PyCodeObject* code)
      : code_(code), bc_(capture::decode(code)), asm_(lift(bc_)), spec_(spec_of(code)) {
    nlocals_ = code->co_nlocals;
    const char* kinds = PyBytes_AS_STRING(code->co_localspluskinds);
    for (int i = 0; i < code->co_nlocalsplus; ++i) {
      if (kinds[i] & kFastCell) throw CannotResume("the function has cell variables");
      if (kinds[i] & kFastFree) ++nfree_;
    }
    PyRef names = checked(PyCode_GetVarnames(code));
    for (int i = 0; i < nlocals_; ++i) names_.push_back(utf8(PyTuple_GET_ITEM(names.get(), i)));
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

  const capture::Bytecode& bytecode() const { return bc_; }
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
      TL_CHECK(s >= 0 && s < nlocals_) << "passed local " << s << " is not a plain local";
      is_passed[s] = true;
      old_to_new_[s] = static_cast<int>(varnames_.size());
      varnames_.push_back(names_[s]);
    }
    argcount_ = static_cast<int>(varnames_.size() + extra_params.size());
    for (auto& n : extra_params) varnames_.push_back(n);
    for (int s = 0; s < nlocals_; ++s) {
      if (is_passed[s]) continue;
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

  // The prologue (free variables, RESUME, the value stack from arguments),
  // then the original instructions with renumbered locals.
  std::vector<Instr> body(const std::string& stack, int entry, int line, bool iter_calls) {
    std::vector<Instr> out;
    if (nfree_) out.push_back(make(COPY_FREE_VARS, nfree_, line));
    out.push_back(make(RESUME, 0, line));
    int j = 0;
    for (char c : stack) {
      if (c == static_cast<char>(Slot::Null)) {
        out.push_back(make(PUSH_NULL, 0, line));
        continue;
      }
      out.push_back(make(LOAD_FAST, slot(fresh("stack" + std::to_string(j++))), line));
      if (c == static_cast<char>(Slot::Iter)) {
        TL_CHECK(iter_calls) << "iterator on a resume function's stack";
        out.push_back(make(GET_ITER, 0, line));
      }
    }
    Instr jump = make(JUMP_FORWARD, 0, line);
    jump.target = entry;
    out.push_back(jump);
    const int new_nlocals = static_cast<int>(varnames_.size());
    for (Instr in : asm_.insts) {
      unsigned f = capture::opcode_flags(in.opcode);
      if (f & capture::kLocal) in.arg = old_to_new_.at(in.arg);
      if (f & capture::kFree) in.arg = in.arg - nlocals_ + new_nlocals;
      out.push_back(in);
    }
    return out;
  }

  const std::vector<ExceptionBlock>& blocks() const { return asm_.blocks; }

  PyRef assemble_with(Assembly a, const std::string& qualname, PyObject* extra_const) {
    CodeSpec s = spec_;
    s.argcount = argcount_;
    s.posonlyargcount = 0;
    s.kwonlyargcount = 0;
    s.flags &= ~(CO_VARARGS | CO_VARKEYWORDS);
    PyRef vn = checked(PyTuple_New(static_cast<Py_ssize_t>(varnames_.size())));
    for (size_t i = 0; i < varnames_.size(); ++i)
      PyTuple_SET_ITEM(vn.get(), i, checked(PyUnicode_FromString(varnames_[i].c_str())).release());
    s.varnames = vn;
    if (extra_const) {
      Py_ssize_t n = PyTuple_GET_SIZE(s.consts.get());
      PyRef consts = checked(PyTuple_New(n + 1));
      for (Py_ssize_t i = 0; i < n; ++i)
        PyTuple_SET_ITEM(consts.get(), i, Py_NewRef(PyTuple_GET_ITEM(s.consts.get(), i)));
      PyTuple_SET_ITEM(consts.get(), n, Py_NewRef(extra_const));
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
  capture::Bytecode bc_;
  Assembly asm_;
  CodeSpec spec_;
  int nlocals_ = 0;
  int nfree_ = 0;
  int argcount_ = 0;
  std::string prefix_;
  std::vector<std::string> names_;
  std::vector<std::string> varnames_;
  std::vector<int> old_to_new_;
};

std::vector<std::string> numbered(const Rewriter& rw, const char* base, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(rw.fresh(base + std::to_string(i)));
  return out;
}

size_t count_values(const std::string& stack) {
  size_t n = 0;
  for (char c : stack) n += c != static_cast<char>(Slot::Null);
  return n;
}

// The resume function entered at instruction `entry` with `stack`.
PyRef resume_code(PyCodeObject* code, int entry, const std::string& stack,
                  const std::vector<int>& locals) {
  Registry& reg = registry();
  std::string key = key_of(code, entry, stack, locals, false);
  auto it = reg.resumes.find(key);
  if (it != reg.resumes.end()) return it->second;
  Rewriter rw(code);
  rw.renumber(locals, numbered(rw, "stack", count_values(stack)), {});
  int line = rw.line_near(entry);
  Assembly a;
  a.insts = rw.body(stack, entry, line, false);
  a.blocks = rw.blocks();
  PyRef made = rw.assemble_with(
      std::move(a), rw.qualname() + " (resumed at line " + std::to_string(line) + ")", nullptr);
  auto* co = reinterpret_cast<PyCodeObject*>(made.get());
  std::vector<std::pair<int, bool>> exits;
  int j = 0;
  for (char c : stack) {
    if (c == static_cast<char>(Slot::Null)) continue;
    int s = rw.slot(rw.fresh("stack" + std::to_string(j++)));
    if (c == static_cast<char>(Slot::ExitTrue)) exits.emplace_back(s, true);
    if (c == static_cast<char>(Slot::ExitFalse)) exits.emplace_back(s, false);
  }
  if (!exits.empty()) reg.exits[co] = std::move(exits);
  reg.keep(code);
  reg.resumes.emplace(key, made);
  return made;
}

// Stores the stack after the breaking instruction in temporaries (dropping
// NULLs by calling int() on them: CALL consumes a NULL, nothing else does),
// then returns resume(*locals, *stack).
void append_stub(std::vector<Instr>& out, int label, const std::string& post, int resume_slot,
                 const std::vector<int>& local_slots, const Rewriter& rw, int int_const, int line) {
  auto add = [&](int op, int arg) { out.push_back(Rewriter::make(op, arg, line)); };
  size_t first = out.size();
  for (int i = static_cast<int>(post.size()) - 1; i >= 0; --i) {
    if (post[i] == static_cast<char>(Slot::Null)) {
      add(LOAD_CONST, int_const);
#ifdef PRECALL
      add(PRECALL, 0);
#endif
      add(CALL, 0);
      add(POP_TOP, 0);
    } else {
      add(STORE_FAST, rw.slot(rw.fresh("tmp" + std::to_string(i))));
    }
  }
  add(PUSH_NULL, 0);
  add(LOAD_FAST, resume_slot);
  int n = 0;
  for (int s : local_slots) add(LOAD_FAST, s), ++n;
  for (size_t i = 0; i < post.size(); ++i)
    if (post[i] != static_cast<char>(Slot::Null))
      add(LOAD_FAST, rw.slot(rw.fresh("tmp" + std::to_string(i)))), ++n;
#ifdef PRECALL
  add(PRECALL, n);
#endif
  add(CALL, n);
  add(RETURN_VALUE, 0);
  out[first].label = label;
}

std::unique_ptr<BridgeCode> make_bridge(const BreakSite& site) {
  Rewriter rw(site.code);
  const capture::Bytecode& bc = rw.bytecode();
  TL_CHECK(site.index >= 0 && site.index < static_cast<int>(bc.insts.size()))
      << "break at instruction " << site.index;
  auto out = std::make_unique<BridgeCode>();
  int line = rw.line_near(site.index);

  // The breaking instruction and its successors (none in region mode).
  int last = site.index;
  struct Successor {
    int entry;
    std::string stack;
    bool jump;  // the taken branch of the breaking jump
  };
  std::vector<Successor> succ;
  if (!site.region) {
    if (site.stack.find(static_cast<char>(Slot::Iter)) != std::string::npos)
      throw CannotResume("break with a loop iterator on the stack");
    while (last + 1 < static_cast<int>(bc.insts.size()) && (bc.insts[last].opcode == KW_NAMES
#ifdef PRECALL
                                                            || bc.insts[last].opcode == PRECALL
#endif
                                                            ))
      ++last;
    Effect e = effect_of(bc.insts[last]);
    if (e.pops > static_cast<int>(site.stack.size()))
      throw CannotResume("stack shallower than the breaking instruction needs");
    std::string below = site.stack.substr(0, site.stack.size() - e.pops);
    if (e.falls) succ.push_back({last + 1, below + e.pushes, false});
    if (e.jumps)
      succ.push_back({bc.insts[last].jump_target,
                      site.stack.substr(0, site.stack.size() - e.jump_pops), true});
  }
  size_t tmps = 0;
  for (auto& s : succ) {
    tmps = std::max(tmps, s.stack.size());
    out->resumes.push_back(resume_code(site.code, s.entry, s.stack, site.locals));
    out->resume_lines.push_back(rw.line_near(s.entry));
  }

  rw.renumber(
      site.locals,
      [&] {
        auto p = numbered(rw, "stack", count_values(site.stack));
        for (auto& r : numbered(rw, "resume", succ.size())) p.push_back(r);
        return p;
      }(),
      numbered(rw, "tmp", tmps));
  Assembly a;
  a.insts = rw.body(site.stack, site.index, line, true);
  a.blocks = rw.blocks();
  std::vector<int> local_slots;
  for (int s : site.locals) local_slots.push_back(rw.slot_of_original(s));
  const int int_const = rw.consts_size();
  for (size_t k = 0; k < succ.size(); ++k) {
    const int label = kFirstNewLabel + static_cast<int>(k);
    const int resume_slot = rw.slot(rw.fresh("resume" + std::to_string(k)));
    if (!succ[k].jump) {
      // Fall-through: a jump right after the breaking instruction.
      auto pos = std::find_if(a.insts.begin(), a.insts.end(),
                              [&](const Instr& in) { return in.label == last; });
      Instr jump = Rewriter::make(JUMP_FORWARD, 0, line);
      jump.target = label;
      a.insts.insert(pos + 1, jump);
    } else {
      for (Instr& in : a.insts)
        if (in.label == last) in.target = label;
    }
    append_stub(a.insts, label, succ[k].stack, resume_slot, local_slots, rw, int_const, line);
  }
  out->bridge = rw.assemble_with(
      std::move(a), rw.qualname() + " (graph break at line " + std::to_string(line) + ")",
      reinterpret_cast<PyObject*>(&PyLong_Type));
  return out;
}

}  // namespace

const BridgeCode& bridge_for(const BreakSite& site) {
  Registry& reg = registry();
  std::string key = key_of(site.code, site.index, site.stack, site.locals, site.region);
  auto it = reg.bridges.find(key);
  if (it != reg.bridges.end()) return *it->second;
  std::unique_ptr<BridgeCode> made = make_bridge(site);
  reg.bridge_codes.insert(reinterpret_cast<PyCodeObject*>(made->bridge.get()));
  reg.keep(site.code);
  return *reg.bridges.emplace(key, std::move(made)).first->second;
}

bool is_bridge(PyCodeObject* code) { return registry().bridge_codes.count(code) > 0; }

const std::vector<std::pair<int, bool>>* resume_grad_exits(PyCodeObject* code) {
  auto& exits = registry().exits;
  auto it = exits.find(code);
  return it == exits.end() ? nullptr : &it->second;
}

}  // namespace tl::bytecode
