// Loop-body functions (see loop_body.h): the body function's code, built from
// the analysis of loop_flow.h, and the call the bridge makes in its place.
#include "bytecode/loop_body.h"

#include <opcode.h>

#include <algorithm>
#include <iterator>
#include <optional>

#include "bytecode/decode.h"
#include "bytecode/loop_flow.h"
#include "bytecode/opcode_tables.h"
#include "bytecode/rewriter.h"
#include "core/errors.h"

namespace tl::bytecode {
namespace {

constexpr char kValue = static_cast<char>(Slot::Value);
constexpr char kNull = static_cast<char>(Slot::Null);

// The same jump, forward: stubs sit after every body instruction.
int forward_form(int opcode) {
  switch (opcode) {
    case JUMP_BACKWARD:
    case JUMP_BACKWARD_NO_INTERRUPT:
      return JUMP_FORWARD;
#ifdef POP_JUMP_BACKWARD_IF_TRUE
    case POP_JUMP_BACKWARD_IF_TRUE:
      return POP_JUMP_FORWARD_IF_TRUE;
    case POP_JUMP_BACKWARD_IF_FALSE:
      return POP_JUMP_FORWARD_IF_FALSE;
    case POP_JUMP_BACKWARD_IF_NONE:
      return POP_JUMP_FORWARD_IF_NONE;
    case POP_JUMP_BACKWARD_IF_NOT_NONE:
      return POP_JUMP_FORWARD_IF_NOT_NONE;
#endif
    default:
      return opcode;
  }
}

constexpr int kJumpIfTrue = kPopJumpIfTrue;
#ifdef POP_JUMP_FORWARD_IF_TRUE
constexpr int kCompareEq = 2;  // cmp_op index of ==
#else
constexpr int kCompareEq = (2 << 4) | 8;  // 3.12: op << 4 | the COMPARISON_EQUALS mask
#endif
#ifdef LOAD_FAST_CHECK
constexpr int kLoadChecked = LOAD_FAST_CHECK;  // NOTE: 3.12's LOAD_FAST assumes a bound local
#else
constexpr int kLoadChecked = LOAD_FAST;
#endif

PyObject* unbound(PyObject*, PyObject*) { Py_RETURN_NONE; }

// What a body function hands back for a local it did not assign: an object no
// user code can hold. A builtin function, so that the tracer treats it as a
// constant it may pass on at a break. Borrowed; lives for the process.
PyObject* unbound_sentinel() {
  static PyMethodDef def{"torchlite_unbound_local", unbound, METH_NOARGS, nullptr};
  static PyObject* s = PyCFunction_New(&def, nullptr);
  if (!s) throw PythonError();
  return s;
}

}  // namespace

PyObject* unbound_local() { return unbound_sentinel(); }

std::vector<PyObject*> LoopConsts::objects() const {
  std::vector<PyObject*> out{reinterpret_cast<PyObject*>(&PyLong_Type), Py_None,
                             unbound_sentinel()};
  for (int s = 0; s < n_status; ++s) {
    static std::vector<PyRef> ints;  // NOTE: kept for the process, like the codes using them
    while (static_cast<int>(ints.size()) <= s)
      ints.push_back(checked(PyLong_FromLong(static_cast<long>(ints.size()))));
    out.push_back(ints[s].get());
  }
  return out;
}

namespace {

class Emit {
 public:
  Emit(std::vector<Instr>& out, int line) : out_(out), line_(line) {}
  Emit& op(int opcode, int arg = 0, int target = kNoLabel) {
    Instr in = Rewriter::make(opcode, arg, line_);
    in.target = target;
    if (label_ != kNoLabel) in.label = label_, label_ = kNoLabel;
    out_.push_back(in);
    return *this;
  }
  // The next instruction gets `label`.
  Emit& at(int label) {
    label_ = label;
    return *this;
  }
  Emit& call(int nargs) {
#ifdef PRECALL
    op(PRECALL, nargs);
#endif
    return op(CALL, nargs);
  }
  // Pops `slots` (Slot chars, bottom first) from the top down; a NULL goes
  // by calling int() on it (CALL is the only instruction that consumes one).
  Emit& pop(const std::string& slots, const LoopConsts& k) {
    for (auto c = slots.rbegin(); c != slots.rend(); ++c) {
      if (*c == kNull) {
        op(LOAD_CONST, k.int_type());
        if (kNullAboveCallable) op(SWAP, 2);
        call(0);
      }
      op(POP_TOP);
    }
    return *this;
  }

 private:
  std::vector<Instr>& out_;
  int line_;
  int label_ = kNoLabel;
};

std::vector<ExceptionBlock> body_blocks(const Rewriter& rw, const std::vector<bool>& member,
                                        int outer_handler) {
  std::vector<ExceptionBlock> out;
  for (ExceptionBlock b : rw.blocks()) {
    if (b.handler == outer_handler || !member[b.handler]) continue;
    int first = b.first, last = b.last;
    while (first <= last && !member[first]) ++first;
    while (last >= first && !member[last]) --last;
    if (first > last) continue;
    b.first = first;
    b.last = last;
    out.push_back(b);
  }
  return out;
}

}  // namespace

namespace {

// An exception leaving the body function loses what the iteration assigned
// before it: fine when it leaves the frame too, wrong when a with-block
// around the loop swallows it and the frame goes on. Only grad-mode blocks
// (their __exit__ never swallows) may hold the loop: a with-block's __exit__
// sits at its handler's depth - 1, below the loop when the block holds it.
// (Other handlers around a loop re-raise: try blocks are regions of their own.)
void check_no_swallowing_with(const Bytecode& bc, const std::string& outer) {
  const int n = static_cast<int>(bc.insts.size());
  for (const auto& e : bc.exception_table) {
    int h = bc.index_at_offset(e.target);
    if (h < 0 || h + 1 >= n || bc.insts[h].opcode != PUSH_EXC_INFO ||
        bc.insts[h + 1].opcode != WITH_EXCEPT_START)
      continue;
    int exit = e.depth - 1;
    if (exit < 0 || exit >= static_cast<int>(outer.size())) continue;
    if (outer[exit] != static_cast<char>(Slot::ExitTrue) &&
        outer[exit] != static_cast<char>(Slot::ExitFalse))
      throw CannotResume("a with-block around the loop may swallow an exception");
  }
}

}  // namespace

std::optional<LoopBody> outline_loop(const BreakSite& site) {
  Rewriter rw(site.code);
  const Bytecode& bc = rw.bytecode();
  const int n = rw.size();
  const int head = site.index;
  int last = -1;
  for (int i = head; i < n; ++i)
    if (bc.insts[i].jump_target == head) last = i;
  // A for loop whose body always leaves it (no backward jump) ends before FOR_ITER's target.
  if (last < 0 && bc.insts[head].opcode == FOR_ITER) last = bc.insts[head].jump_target - 1;
  if (last < 0) return std::nullopt;
  if (site.code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
    throw CannotResume("a loop in a generator");
  LoopBody loop;
  loop.head = head;
  loop.is_for = bc.insts[head].opcode == FOR_ITER;
  loop.entry = loop.is_for ? head + 1 : head;
  loop.outer = site.stack;
  if (loop.is_for) {
    if (loop.outer.empty() || loop.outer.back() != static_cast<char>(Slot::Iter))
      throw CannotResume("no iterator at the loop head");
    loop.outer.pop_back();
  }
  check_no_swallowing_with(bc, loop.outer);
  loop.params = site.locals;
  if (loop.is_for) {
    // `for x in` / `for a, b in` with plain locals: the bridge stores the
    // item, and the targets are parameters like the head's locals (a layer
    // of a ModuleList is then a parameter of its own, guarded by identity).
    int i = head + 1, count = 1;
    if (bc.insts[i].opcode == UNPACK_SEQUENCE) count = bc.insts[i++].arg;
    bool plain = count >= 1 && i + count < n;
    for (int j = 0; plain && j < count; ++j) plain = bc.insts[i + j].opcode == STORE_FAST;
    if (plain) {
      loop.item_stored = true;
      loop.entry = i + count;
      for (int j = 0; j < count; ++j) {
        const int x = bc.insts[i + j].arg;
        if (!std::binary_search(site.locals.begin(), site.locals.end(), x))
          loop.targets.push_back(x);
      }
      std::sort(loop.targets.begin(), loop.targets.end());
      loop.targets.erase(std::unique(loop.targets.begin(), loop.targets.end()), loop.targets.end());
      loop.params.clear();
      std::set_union(site.locals.begin(), site.locals.end(), loop.targets.begin(),
                     loop.targets.end(), std::back_inserter(loop.params));
    }
  }
  const LoopShape shape = analyze_loop(bc, loop, last, site.code->co_nlocals);
  // NOTE: an argument that is a cell reaches the body as a free variable, never as a local
  // it could hand back (3.12 saves and restores one around an inlined comprehension).
  for (int x : shape.assigned)
    if (rw.is_cell(x)) throw CannotResume("a loop that stores a cell variable as a local");
  loop.guarded = shape.outer_handler >= 0;
  const std::vector<bool>& member = shape.member;
  for (int x : shape.assigned)
    if (!std::binary_search(loop.params.begin(), loop.params.end(), x)) loop.assigned.push_back(x);
  for (int t : shape.exits) loop.exits.push_back({t, shape.depth[t]});
  loop.line = rw.line_near(head);

  // Parameters: the head's locals, the stack (below the loop, the iterator's
  // placeholder, the item), as the prologue pushes it again.
  std::string stack;
  for (char c : loop.outer) stack += c == kNull ? kNull : kValue;
  if (loop.is_for) stack += loop.item_stored ? "V" : "VV";
  rw.renumber(loop.params, numbered(rw, "stack", count_values(stack)), {rw.fresh("ret")});
  const LoopConsts k{rw.consts_size(), kFirstExit + static_cast<int>(loop.exits.size())};
  const int ret = rw.slot(rw.fresh("ret"));
  std::vector<int> back;
  for (int p : loop.params) back.push_back(rw.slot_of_original(p));
  for (int q : loop.assigned) back.push_back(rw.slot_of_original(q));
  // Leaves the body: the stack below the value is gone, the result is
  // (status, value, *back).
  auto hand_back = [&](Emit& e, int status, bool value) {
    e.op(LOAD_CONST, k.status(status));
    if (value)
      e.op(LOAD_FAST, ret);
    else
      e.op(LOAD_CONST, k.none());
    for (int s : back) e.op(kLoadChecked, s);
    e.op(BUILD_TUPLE, 2 + static_cast<int>(back.size())).op(RETURN_VALUE);
  };
  const std::string at_head = stack.substr(0, loop.outer.size() + (loop.is_for ? 1 : 0));

  // NOTE: the stack parameters are unbound once pushed: a break in the body
  // then hands each value on once, on the stack (a grad-mode __exit__ can
  // only be passed there).
  std::vector<Instr> out = rw.prologue(stack, loop.line, false, true);
  {
    Emit e(out, loop.line);
    for (int q : loop.assigned)
      e.op(LOAD_CONST, k.unbound()).op(STORE_FAST, rw.slot_of_original(q));
    e.op(JUMP_FORWARD, 0, loop.entry);
  }
  const int cont_label = kFirstNewLabel;
  auto exit_label = [&](int t) {
    auto it = std::find(shape.exits.begin(), shape.exits.end(), t);
    TL_CHECK(it != shape.exits.end()) << "instruction " << t << " is not an exit of the loop";
    return kFirstNewLabel + 1 + static_cast<int>(it - shape.exits.begin());
  };
  auto leaves = [&](int t) { return t == head || !member[t]; };
  auto stub_label = [&](int t) { return t == head ? cont_label : exit_label(t); };
  const std::vector<std::vector<Instr>> orig = rw.original_groups();
  for (int i = 0; i < n; ++i) {
    if (!member[i]) continue;
    // NOTE: a 3.13 superinstruction comes as two plain instructions: the
    // first, like any other, neither jumps nor returns.
    out.insert(out.end(), orig[i].begin(), orig[i].end() - 1);
    Instr in = orig[i].back();
    const int line = in.line;
    if (is_return(in.opcode)) {
      loop.returns = true;
      Emit e(out, line);
      e.at(i);
      int below = shape.depth[i] - 1;
#ifdef RETURN_CONST
      if (in.opcode == RETURN_CONST) e.op(LOAD_CONST, in.arg), ++below;
#endif
      if (below > static_cast<int>(at_head.size()))
        throw CannotResume("`return` with values on the stack");
      e.op(STORE_FAST, ret).pop(at_head.substr(0, below), k);
      hand_back(e, kReturn, true);
      continue;
    }
    const int t = bc.insts[i].jump_target;
    if (t >= 0 && leaves(t)) {
      in.opcode = forward_form(in.opcode);
      in.target = stub_label(t);
    }
    out.push_back(in);
    if (!ends_flow(in.opcode) && i + 1 < n && leaves(i + 1)) {
      Instr jump = Rewriter::make(JUMP_FORWARD, 0, line);
      jump.target = stub_label(i + 1);
      out.push_back(jump);
    }
  }
  {
    Emit e(out, rw.line_near(last));
    e.at(cont_label).pop(at_head, k);
    hand_back(e, kContinue, false);
    for (size_t x = 0; x < loop.exits.size(); ++x) {
      const auto& ex = loop.exits[x];
      e.at(exit_label(ex.target)).pop(at_head.substr(0, ex.depth), k);
      hand_back(e, kFirstExit + static_cast<int>(x), false);
    }
  }
  Assembly body;
  body.insts = std::move(out);
  body.blocks = body_blocks(rw, member, shape.outer_handler);
  loop.code = rw.assemble_with(
      std::move(body), rw.qualname() + " (loop body at line " + std::to_string(loop.line) + ")",
      k.objects());
  int j = 0;
  for (char c : loop.outer) {
    if (c == kNull) continue;
    int slot = rw.slot(rw.fresh("stack" + std::to_string(j++)));
    if (c == static_cast<char>(Slot::ExitTrue)) loop.grad_exits.emplace_back(slot, true);
    if (c == static_cast<char>(Slot::ExitFalse)) loop.grad_exits.emplace_back(slot, false);
  }
  return loop;
}

void insert_loop_call(std::vector<Instr>& insts, const LoopBody& loop, const Rewriter& rw,
                      int body_slot, const LoopConsts& k, const std::string& site_stack,
                      const std::vector<int>& exit_labels) {
  constexpr int kBase = kFirstNewLabel + (1 << 20);
  const int stub = kBase, first_status = kBase + 1, first_q = kBase + 4096;
  auto status_label = [&](int s) { return first_status + s; };
  const int item = rw.slot(rw.fresh("item")), status = rw.slot(rw.fresh("status")),
            ret = rw.slot(rw.fresh("ret"));
  // A while loop's body starts at its head: jumps there now call the body.
  if (!loop.is_for)
    for (Instr& in : insts)
      if (in.target == loop.head) in.target = stub;
  if (loop.is_for && !exit_labels.empty())
    for (Instr& in : insts)
      if (in.label == loop.head) in.target = exit_labels.back();

  std::vector<Instr> s;
  Emit e(s, loop.line);
  e.at(stub);
  const bool pass_item = loop.is_for && !loop.item_stored;
  if (pass_item) e.op(STORE_FAST, item);
  if (kNullAboveCallable)
    e.op(LOAD_FAST, body_slot).op(PUSH_NULL);
  else
    e.op(PUSH_NULL).op(LOAD_FAST, body_slot);
  int depth = static_cast<int>(site_stack.size()) + 2, nargs = 0;
  for (int p : loop.params) e.op(kLoadChecked, rw.slot_of_original(p)), ++depth, ++nargs;
  for (size_t j = 0; j < loop.outer.size(); ++j) {
    if (loop.outer[j] == kNull) continue;
    e.op(COPY, depth - static_cast<int>(j));
    ++depth, ++nargs;
  }
  if (loop.is_for) e.op(LOAD_CONST, k.none()), ++nargs;
  if (pass_item) e.op(LOAD_FAST, item), ++nargs;
  e.call(nargs);
  const int nback = static_cast<int>(loop.params.size() + loop.assigned.size());
  e.op(UNPACK_SEQUENCE, 2 + nback).op(STORE_FAST, status).op(STORE_FAST, ret);
  for (int p : loop.params) e.op(STORE_FAST, rw.slot_of_original(p));
  // A local the body did not assign comes back as the sentinel: keep the old value.
  for (size_t q = 0; q < loop.assigned.size(); ++q) {
    const int skip = first_q + 2 * static_cast<int>(q), next = skip + 1;
    e.op(COPY, 1).op(LOAD_CONST, k.unbound()).op(IS_OP, 0).op(kJumpIfTrue, 0, skip);
    e.op(STORE_FAST, rw.slot_of_original(loop.assigned[q])).op(JUMP_FORWARD, 0, next);
    e.at(skip).op(POP_TOP).at(next).op(NOP);
  }
  std::vector<int> statuses{kContinue};
  if (loop.returns) statuses.push_back(kReturn);
  for (size_t x = 0; x < loop.exits.size(); ++x)
    statuses.push_back(kFirstExit + static_cast<int>(x));
  for (size_t i = 0; i + 1 < statuses.size(); ++i) {
    e.op(LOAD_FAST, status).op(LOAD_CONST, k.status(statuses[i])).op(COMPARE_OP, kCompareEq);
    e.op(kJumpIfTrue, 0, status_label(statuses[i]));
  }
  e.op(JUMP_FORWARD, 0, status_label(statuses.back()));
  e.at(status_label(kContinue)).op(JUMP_BACKWARD, 0, loop.is_for ? loop.head : stub);
  if (loop.returns)
    e.at(status_label(kReturn)).pop(site_stack, k).op(LOAD_FAST, ret).op(RETURN_VALUE);
  for (size_t x = 0; x < loop.exits.size(); ++x) {
    const auto& ex = loop.exits[x];
    e.at(status_label(kFirstExit + static_cast<int>(x))).pop(site_stack.substr(ex.depth), k);
    if (!exit_labels.empty())
      e.op(JUMP_FORWARD, 0, exit_labels[x]);  // the call of the code after the loop, at the end
    else
      e.op(ex.target >= loop.entry ? JUMP_FORWARD : JUMP_BACKWARD, 0, ex.target);
  }
  auto pos = std::find_if(insts.begin(), insts.end(),
                          [&](const Instr& in) { return in.label == loop.entry; });
  TL_CHECK(pos != insts.end()) << "no loop body at instruction " << loop.entry;
  insts.insert(pos, s.begin(), s.end());
}

}  // namespace tl::bytecode
