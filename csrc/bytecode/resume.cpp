// Bridges and resume functions (see resume.h). Both are the original
// instruction list, lifted to labels, with renumbered fast locals, a
// prologue that rebuilds the value stack from arguments and jumps to the
// break, and (bridge only) call stubs appended after the last original
// instruction, so that no exception-table range covers them: an exception
// leaving a resume function must not run a with-block's __exit__ twice.
#include "bytecode/resume.h"

#include <opcode.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "bytecode/assembler.h"
#include "bytecode/decode.h"
#include "bytecode/loop_body.h"
#include "bytecode/opcode_tables.h"
#include "bytecode/rewriter.h"
#include "core/errors.h"

namespace tl::bytecode {
namespace {

// The breaking instruction's stack effect: `pops` values, then `pushes`
// (Slot chars); `jump_pops` on the taken branch of a conditional jump.
struct Effect {
  int pops = 0;
  std::string pushes;
  bool falls = true;
  bool jumps = false;
  int jump_pops = 0;
};

Effect effect_of(const Instruction& in) {
  const int a = in.arg;
  auto v = [](int n) { return std::string(n, 'V'); };
  switch (in.opcode) {
    case CALL:
      return {a + 2, v(1)};
#ifdef CALL_KW
    case CALL_KW:  // 3.13: the keyword names tuple above the arguments
      return {a + 3, v(1)};
#endif
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
#ifdef TO_BOOL
    case TO_BOOL:
    case CONVERT_VALUE:
    case FORMAT_SIMPLE:
      return {1, v(1)};
    case FORMAT_WITH_SPEC:
      return {2, v(1)};
#endif
    case LOAD_ATTR:
#if PY_VERSION_HEX >= 0x030C0000
      // NOTE: a method lookup pushes (function, self) or (NULL, attribute):
      // which one is only known when it runs, so no stub can follow it.
      if (a & 1) throw CannotResume("break at a method lookup");
#endif
      return {1, v(1)};
    case LOAD_GLOBAL:
      if (!(a & 1)) return {0, "V"};
      return {0, kNullAboveCallable ? "VN" : "NV"};
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
#ifdef FORMAT_VALUE
    case FORMAT_VALUE:
      return {(a & 0x04) ? 2 : 1, v(1)};
#endif
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
      throw CannotResume(std::string("no resume function after ") + opcode_name(in.opcode));
  }
}

struct Registry {
  std::map<std::string, std::unique_ptr<BridgeCode>> bridges;
  std::map<std::string, PyRef> resumes;
  std::set<PyCodeObject*> bridge_codes;
  std::unordered_map<PyCodeObject*, std::vector<std::pair<int, bool>>> exits;
  // Generated code (bridge, resume function, loop body) -> the code it was made from.
  std::unordered_map<PyCodeObject*, PyCodeObject*> made_from;
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

// The resume function entered at instruction `entry` with `stack`. Locals of
// `maybe_unbound` (a subset of `locals`) may be passed as unbound_local():
// the prologue unbinds them (a loop that may not have assigned them).
PyRef resume_code(PyCodeObject* code, int entry, const std::string& stack,
                  const std::vector<int>& locals, const std::vector<int>& maybe_unbound = {}) {
  Registry& reg = registry();
  std::string key = key_of(code, entry, stack, locals, false) + "u";
  for (int l : maybe_unbound) key += std::to_string(l) + ",";
  auto it = reg.resumes.find(key);
  if (it != reg.resumes.end()) return it->second;
  Rewriter rw(code);
  rw.renumber(locals, numbered(rw, "stack", count_values(stack)), {});
  int line = rw.line_near(entry);
  Assembly a;
  // NOTE: the stack parameters are unbound once pushed, so a later break hands each value on
  // once, on the stack (a grad-mode __exit__ can only be passed there).
  a.insts = rw.prologue(stack, line, false, true);
  std::vector<PyObject*> consts;
  if (!maybe_unbound.empty()) consts.push_back(unbound_local());
  for (size_t i = 0; i < maybe_unbound.size(); ++i) {
    const int slot = rw.slot_of_original(maybe_unbound[i]);
    const int kept = kFirstNewLabel + static_cast<int>(i);
    auto add = [&](int op, int arg, int target = kNoLabel) {
      a.insts.push_back(Rewriter::make(op, arg, line));
      a.insts.back().target = target;
    };
    add(LOAD_FAST, slot);
    add(LOAD_CONST, rw.consts_size());
    add(IS_OP, 1);
    add(kPopJumpIfTrue, 0, kept);
    add(DELETE_FAST, slot);
    add(NOP, 0);
    a.insts.back().label = kept;
  }
  Instr jump = Rewriter::make(JUMP_FORWARD, 0, line);
  jump.target = entry;
  a.insts.push_back(jump);
  for (const Instr& in : rw.original()) a.insts.push_back(in);
  a.blocks = rw.blocks();
  PyRef made = rw.assemble_with(
      std::move(a), rw.qualname() + " (resumed at line " + std::to_string(line) + ")", consts);
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
  reg.made_from[co] = code;
  reg.keep(code);
  reg.resumes.emplace(key, made);
  return made;
}

// Stores the stack after the breaking instruction in temporaries (dropping
// NULLs by calling int() on them: CALL consumes a NULL, nothing else does),
// then returns resume(*locals, *stack), the resume function made by
// `load_resume` (Rewriter::make_function).
void append_stub(std::vector<Instr>& out, int label, const std::string& post,
                 const std::vector<Instr>& load_resume, const std::vector<int>& local_slots,
                 const Rewriter& rw, int int_const, int line) {
  auto add = [&](int op, int arg) { out.push_back(Rewriter::make(op, arg, line)); };
  size_t first = out.size();
  for (int i = static_cast<int>(post.size()) - 1; i >= 0; --i) {
    if (post[i] == static_cast<char>(Slot::Null)) {
      drop_null(out, int_const, line);
      add(POP_TOP, 0);
    } else {
      add(STORE_FAST, rw.slot(rw.fresh("tmp" + std::to_string(i))));
    }
  }
  if (!kNullAboveCallable) add(PUSH_NULL, 0);
  for (const Instr& in : load_resume) out.push_back(in);
  if (kNullAboveCallable) add(PUSH_NULL, 0);
  int n = 0;
  for (int s : local_slots) add(LOAD_FAST, s), ++n;
  for (size_t i = 0; i < post.size(); ++i)
    if (post[i] != static_cast<char>(Slot::Null))
      add(LOAD_FAST, rw.slot(rw.fresh("tmp" + std::to_string(i)))), ++n;
  // NOTE: unbound again before the call: the bridge's frame, suspended while the resume function
  // runs, shows the user's locals only (a frame object taken at the break, f_back of the resume).
  for (size_t i = 0; i < post.size(); ++i)
    if (post[i] != static_cast<char>(Slot::Null))
      add(DELETE_FAST, rw.slot(rw.fresh("tmp" + std::to_string(i))));
#ifdef PRECALL
  add(PRECALL, n);
#endif
  add(CALL, n);
  add(RETURN_VALUE, 0);
  out[first].label = label;
}

#ifdef END_FOR
constexpr int END_FOR_OR_NOP = END_FOR;
#else
constexpr int END_FOR_OR_NOP = NOP;
#endif

// Where CPython goes on after the breaking instruction: a resume function
// entered at `entry` with `stack`.
struct Successor {
  int entry;
  std::string stack;
  bool jump;  // the taken branch of the breaking jump (of FOR_ITER, for a loop's end)
};

// Where the code after an outlined loop starts, each a resume function: the
// loop's exits, then (for loops) the loop's end. None when the bridge could
// reach that code another way: a with-block around the loop whose __exit__
// swallows an exception goes on after the block in the bridge, which has the
// locals the body may assign bound to the sentinel. Grad-mode with-blocks
// never swallow one; any other value below a guarded loop may be such a block.
std::vector<Successor> after_loop(const LoopBody& loop, const Bytecode& bc) {
  for (char c : loop.outer)
    if (loop.guarded && c != static_cast<char>(Slot::Null) &&
        c != static_cast<char>(Slot::ExitTrue) && c != static_cast<char>(Slot::ExitFalse))
      return {};
  std::vector<Successor> out;
  for (const auto& e : loop.exits) out.push_back({e.target, loop.outer.substr(0, e.depth), false});
  if (loop.is_for) {
    int end = bc.insts[loop.head].jump_target;
#ifdef END_FOR
    if (bc.insts[end].opcode == END_FOR) ++end;  // FOR_ITER jumps over it
#if PY_VERSION_HEX >= 0x030D0000
    if (bc.insts[end].opcode == POP_TOP) ++end;  // 3.13: and the POP_TOP after it
#endif
#endif
    out.push_back({end, loop.outer, true});
  }
  return out;
}

std::unique_ptr<BridgeCode> make_bridge(const BreakSite& site) {
  Rewriter rw(site.code);
  const Bytecode& bc = rw.bytecode();
  TL_CHECK(site.index >= 0 && site.index < static_cast<int>(bc.insts.size()))
      << "break at instruction " << site.index;
  auto out = std::make_unique<BridgeCode>();
  int line = rw.line_near(site.index);

  // The breaking instruction and its successors (none in region mode).
  int last = site.index;
  std::vector<Successor> succ;
  if (!site.region) {
    if (site.stack.find(static_cast<char>(Slot::Iter)) != std::string::npos)
      throw CannotResume("break with a loop iterator on the stack");
#ifdef KW_NAMES
    while (last + 1 < static_cast<int>(bc.insts.size()) && (bc.insts[last].opcode == KW_NAMES
#ifdef PRECALL
                                                            || bc.insts[last].opcode == PRECALL
#endif
                                                            ))
      ++last;
#endif
    Effect e = effect_of(bc.insts[last]);
#ifdef TO_BOOL
    // NOTE: 3.13 tests truth in TO_BOOL (or a COMPARE_OP with its to-bool bit)
    // and jumps on the exact bool after it: a break there runs both, so the
    // code after the branch is not traced once per bool value.
    const bool to_bool = bc.insts[last].opcode == TO_BOOL ||
                         (bc.insts[last].opcode == COMPARE_OP && (bc.insts[last].arg & 16));
    if (to_bool && last + 1 < static_cast<int>(bc.insts.size()) &&
        (bc.insts[last + 1].opcode == POP_JUMP_IF_TRUE ||
         bc.insts[last + 1].opcode == POP_JUMP_IF_FALSE)) {
      ++last;
      e = {e.pops, "", true, true, e.pops};
    }
#endif
    if (e.pops > static_cast<int>(site.stack.size()))
      throw CannotResume("stack shallower than the breaking instruction needs");
    std::string below = site.stack.substr(0, site.stack.size() - e.pops);
    if (e.falls) succ.push_back({last + 1, below + e.pushes, false});
    if (e.jumps)
      succ.push_back({bc.insts[last].jump_target,
                      site.stack.substr(0, site.stack.size() - e.jump_pops), true});
  }
  // Region mode at a loop: the body becomes a function of its own.
  std::optional<LoopBody> loop;
  if (site.region) {
    try {
      loop = outline_loop(site);
    } catch (const CannotResume& e) {
      out->no_loop_body = e.what();
    }
  }
  size_t tmps = 0;
  for (auto& s : succ) {
    tmps = std::max(tmps, s.stack.size());
    out->resumes.push_back(resume_code(site.code, s.entry, s.stack, site.locals));
    out->resume_lines.push_back(rw.line_near(s.entry));
  }
  const std::vector<Successor> loop_exits = loop ? after_loop(*loop, bc) : std::vector<Successor>{};
  std::vector<int> after_locals;   // passed to the code after the loop
  std::vector<int> maybe_unbound;  // ... of which none may have been assigned
  if (loop) {
    std::set_union(loop->params.begin(), loop->params.end(), loop->assigned.begin(),
                   loop->assigned.end(), std::back_inserter(after_locals));
    std::set_union(loop->targets.begin(), loop->targets.end(), loop->assigned.begin(),
                   loop->assigned.end(), std::back_inserter(maybe_unbound));
  }
  for (auto& s : loop_exits) tmps = std::max(tmps, s.stack.size());

  // NOTE: the resume functions are not parameters: the bridge makes each one
  // (MAKE_FUNCTION of a constant code) where it calls it, so locals() at the
  // break shows none of them.
  rw.renumber(site.locals, numbered(rw, "stack", count_values(site.stack)), [&] {
    auto t = numbered(rw, "tmp", tmps);
    if (loop)
      for (const char* n : {"item", "status", "ret", "loop"}) t.push_back(rw.fresh(n));
    return t;
  }());
  Assembly a;
  // NOTE: the stack parameters are unbound once pushed, so locals()/vars() run by the breaking
  // instruction show the user's locals only.
  a.insts = rw.body(site.stack, site.index, line, true, true);
  a.blocks = rw.blocks();
  std::vector<int> local_slots;
  for (int s : site.locals) local_slots.push_back(rw.slot_of_original(s));
  const int int_const = rw.consts_size();
  std::optional<LoopConsts> loop_consts;
  if (loop) loop_consts = LoopConsts{int_const, kFirstExit + static_cast<int>(loop->exits.size())};
  std::vector<PyObject*> consts =
      loop_consts ? loop_consts->objects()
                  : std::vector<PyObject*>{reinterpret_cast<PyObject*>(&PyLong_Type)};
  // The generated codes the bridge makes functions of, appended to co_consts after `consts`.
  std::vector<PyObject*> fn_codes;
  const int first_code = int_const + static_cast<int>(consts.size());
  auto load_fn = [&](PyObject* code, int at_line) {
    fn_codes.push_back(code);
    return rw.make_function(first_code + static_cast<int>(fn_codes.size()) - 1, at_line);
  };
  for (size_t k = 0; k < succ.size(); ++k) {
    const int label = kFirstNewLabel + static_cast<int>(k);
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
    append_stub(a.insts, label, succ[k].stack, load_fn(out->resumes[k].get(), line), local_slots,
                rw, int_const, line);
  }
  if (loop) {
    const LoopConsts& k = *loop_consts;
    std::vector<int> exit_labels;
    for (size_t x = 0; x < loop_exits.size(); ++x)
      exit_labels.push_back(kFirstNewLabel + (1 << 21) + 2 * static_cast<int>(x));
    const int body_slot = rw.slot(rw.fresh("loop"));
    insert_loop_call(a.insts, *loop, rw, body_slot, k, site.stack, exit_labels);
    {
      // The body function, made once before the loop (after the prologue).
      std::vector<Instr> make = load_fn(loop->code.get(), loop->line);
      make.push_back(Rewriter::make(STORE_FAST, body_slot, loop->line));
      auto pos = std::find_if(a.insts.begin(), a.insts.end(), [](const Instr& in) {
        return in.label == kNoLabel && in.opcode == JUMP_FORWARD;
      });
      a.insts.insert(pos, make.begin(), make.end());
    }
    auto* co = reinterpret_cast<PyCodeObject*>(loop->code.get());
    if (!loop->grad_exits.empty()) registry().exits[co] = loop->grad_exits;
    registry().made_from[co] = site.code;
    out->resumes.push_back(loop->code);
    out->resume_lines.push_back(loop->line);
    out->loop_body = true;
    std::vector<int> after_slots;
    for (int l : after_locals) after_slots.push_back(rw.slot_of_original(l));
    for (size_t x = 0; x < loop_exits.size(); ++x) {
      const Successor& e = loop_exits[x];
      out->resumes.push_back(resume_code(site.code, e.entry, e.stack, after_locals, maybe_unbound));
      out->resume_lines.push_back(rw.line_near(e.entry));
      int label = exit_labels[x];
      if (e.jump) {
        // NOTE: 3.12's FOR_ITER jumps over the END_FOR at its target (3.13: over
        // END_FOR and POP_TOP), which pop the last item and the iterator.
#if PY_VERSION_HEX >= 0x030D0000
        Instr end_for = Rewriter::make(END_FOR, 0, loop->line);
        end_for.label = label;
        a.insts.push_back(end_for);
        a.insts.push_back(Rewriter::make(POP_TOP, 0, loop->line));
#elif defined(END_FOR)
        Instr end_for = Rewriter::make(END_FOR, 0, loop->line);
        end_for.label = label;
        a.insts.push_back(end_for);
#else
        Instr end_for = Rewriter::make(NOP, 0, loop->line);
        end_for.label = label;
        a.insts.push_back(end_for);
#endif
        label += 1;
      }
      append_stub(a.insts, label, e.stack, load_fn(out->resumes.back().get(), loop->line),
                  after_slots, rw, int_const, loop->line);
    }
    if (!loop_exits.empty()) {
      // The bridge starts with the locals the body may assign bound to the
      // sentinel: the code after the loop (a resume function) unbinds them.
      auto pos = std::find_if(a.insts.begin(), a.insts.end(), [](const Instr& in) {
        return in.label == kNoLabel && in.opcode == JUMP_FORWARD;
      });
      std::vector<Instr> init;
      for (int q : maybe_unbound) {
        init.push_back(Rewriter::make(LOAD_CONST, k.unbound(), line));
        init.push_back(Rewriter::make(STORE_FAST, rw.slot_of_original(q), line));
      }
      a.insts.insert(pos, init.begin(), init.end());
    }
  }
  consts.insert(consts.end(), fn_codes.begin(), fn_codes.end());
  out->bridge = rw.assemble_with(
      std::move(a), rw.qualname() + " (graph break at line " + std::to_string(line) + ")", consts);
  return out;
}

std::unique_ptr<BridgeCode> make_call_through(PyCodeObject* code, int call_index,
                                              const std::string& below,
                                              const std::vector<int>& locals) {
  if (below.find_first_not_of("NV") != std::string::npos)
    throw CannotResume("a with-block or loop open below an inlined call");
  Rewriter rw(code);
  const Bytecode& bc = rw.bytecode();
  if (call_index < 0 || call_index + 1 >= static_cast<int>(bc.insts.size()) ||
      (bc.insts[call_index].opcode != CALL && bc.insts[call_index].opcode != CALL_FUNCTION_EX))
    throw CannotResume("no call to go on after");
  auto out = std::make_unique<BridgeCode>();
  const int line = rw.line_near(call_index);
  const std::string after = below + static_cast<char>(Slot::Value);
  out->resumes.push_back(resume_code(code, call_index + 1, after, locals));
  out->resume_lines.push_back(rw.line_near(call_index + 1));
  std::vector<std::string> params = numbered(rw, "stack", count_values(below));
  params.push_back(rw.fresh("inner"));
  rw.renumber(locals, params, numbered(rw, "tmp", after.size()));
  Assembly a;
  // NOTE: no original instruction is needed: the call is the only thing run here, and it lies
  // in no try or with block (nested_path), so no handler must cover it.
  a.insts = rw.prologue(below, line, false, true);
  auto add = [&](int op, int arg) { a.insts.push_back(Rewriter::make(op, arg, line)); };
  const int inner = rw.slot(rw.fresh("inner"));
  if (!kNullAboveCallable) add(PUSH_NULL, 0);
  add(LOAD_FAST, inner);
  add(DELETE_FAST, inner);  // NOTE: locals() of this frame shows the user's names only
  if (kNullAboveCallable) add(PUSH_NULL, 0);
#ifdef PRECALL
  add(PRECALL, 0);
#endif
  add(CALL, 0);
  std::vector<int> local_slots;
  for (int s : locals) local_slots.push_back(rw.slot_of_original(s));
  const int int_const = rw.consts_size();
  std::vector<PyObject*> consts{reinterpret_cast<PyObject*>(&PyLong_Type), out->resumes[0].get()};
  append_stub(a.insts, kFirstNewLabel, after, rw.make_function(int_const + 1, line), local_slots,
              rw, int_const, line);
  out->bridge = rw.assemble_with(
      std::move(a), rw.qualname() + " (graph break at line " + std::to_string(line) + ")", consts);
  return out;
}

const BridgeCode& registered(std::string key, std::unique_ptr<BridgeCode> made,
                             PyCodeObject* code) {
  Registry& reg = registry();
  reg.bridge_codes.insert(reinterpret_cast<PyCodeObject*>(made->bridge.get()));
  reg.made_from[reinterpret_cast<PyCodeObject*>(made->bridge.get())] = code;
  reg.keep(code);
  return *reg.bridges.emplace(std::move(key), std::move(made)).first->second;
}

}  // namespace

const BridgeCode& call_through_bridge(PyCodeObject* code, int call_index, const std::string& below,
                                      const std::vector<int>& locals) {
  Registry& reg = registry();
  std::string key = "call:" + key_of(code, call_index, below, locals, false);
  auto it = reg.bridges.find(key);
  if (it != reg.bridges.end()) return *it->second;
  return registered(key, make_call_through(code, call_index, below, locals), code);
}

const BridgeCode& bridge_for(const BreakSite& site) {
  Registry& reg = registry();
  std::string key = key_of(site.code, site.index, site.stack, site.locals, site.region);
  auto it = reg.bridges.find(key);
  if (it != reg.bridges.end()) return *it->second;
  return registered(key, make_bridge(site), site.code);
}

bool is_bridge(PyCodeObject* code) { return registry().bridge_codes.count(code) > 0; }

PyCodeObject* user_code_of(PyCodeObject* code) {
  auto& made_from = registry().made_from;
  for (auto it = made_from.find(code); it != made_from.end(); it = made_from.find(code))
    code = it->second;
  return code;
}

const std::vector<std::pair<int, bool>>* resume_grad_exits(PyCodeObject* code) {
  auto& exits = registry().exits;
  auto it = exits.find(code);
  return it == exits.end() ? nullptr : &it->second;
}

}  // namespace tl::bytecode
