// The loop analysis of loop_flow.h: stack depths, the body's members and
// exits, and the locals that flow in and out.
#include "bytecode/loop_flow.h"

#include <algorithm>
#include <climits>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "bytecode/opcode_tables.h"
#include "bytecode/rewriter.h"
#include "core/errors.h"

namespace tl::bytecode {
namespace {

struct Handler {
  int index = -1;  // first handler instruction
  int depth = 0;   // stack depth at the handler (the exception and lasti included)
  int kept = 0;    // values kept below the exception
};

bool pushes_nothing(int opcode) {
  switch (opcode) {
    case POP_TOP:
    case POP_EXCEPT:
    case STORE_FAST:
#ifdef STORE_FAST_STORE_FAST
    case STORE_FAST_STORE_FAST:
#endif
    case STORE_DEREF:
    case STORE_GLOBAL:
    case STORE_ATTR:
    case STORE_SUBSCR:
    case DELETE_SUBSCR:
    case LIST_APPEND:
    case SET_ADD:
    case MAP_ADD:
    case LIST_EXTEND:
    case SET_UPDATE:
    case DICT_UPDATE:
    case DICT_MERGE:
#ifdef END_FOR
    case END_FOR:
#endif
#ifdef POP_JUMP_FORWARD_IF_TRUE
    case POP_JUMP_FORWARD_IF_TRUE:
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_FORWARD_IF_NONE:
    case POP_JUMP_FORWARD_IF_NOT_NONE:
    case POP_JUMP_BACKWARD_IF_TRUE:
    case POP_JUMP_BACKWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_NONE:
    case POP_JUMP_BACKWARD_IF_NOT_NONE:
#else
    case POP_JUMP_IF_TRUE:
    case POP_JUMP_IF_FALSE:
    case POP_JUMP_IF_NONE:
    case POP_JUMP_IF_NOT_NONE:
#endif
      return true;
    default:
      return false;
  }
}

class Flow {
 public:
  explicit Flow(const Bytecode& bc) : bc_(bc), n_(static_cast<int>(bc.insts.size())) {
    handlers_.assign(n_, Handler{});
    for (int i = 0; i < n_; ++i) {
      const int off = bc.insts[i].offset;
      for (const auto& e : bc.exception_table) {
        if (off < e.start || off >= e.end) continue;
        int h = bc.index_at_offset(e.target);
        if (h < 0) throw CannotResume("exception handler inside an instruction");
        handlers_[i] = {h, e.depth + (e.lasti ? 1 : 0) + 1, e.depth};
        break;
      }
    }
    depths();
  }

  int size() const { return n_; }
  int depth(int i) const { return depth_[i]; }

  // The lowest stack position instruction i may pop or overwrite (INT_MAX:
  // none). Exact for what unwinds a with or except block (SWAP, POP_TOP,
  // CALL, POP_EXCEPT); for other instructions it assumes they push at most
  // one value, which is true of everything that takes operands the
  // enclosing blocks pushed.
  int touched_from(int i) const {
    const auto& in = bc_.insts[i];
    const int d = depth_[i];
    switch (in.opcode) {
      case LOAD_FAST:
      case LOAD_CONST:
      case LOAD_GLOBAL:
      case LOAD_DEREF:
      case LOAD_CLOSURE:
      case LOAD_ASSERTION_ERROR:
      case PUSH_NULL:
      case NOP:
      case COPY:
      case JUMP_FORWARD:
      case JUMP_BACKWARD:
#ifdef LOAD_FAST_CHECK
      case LOAD_FAST_CHECK:
#endif
#ifdef LOAD_FAST_AND_CLEAR
      case LOAD_FAST_AND_CLEAR:
#endif
#ifdef LOAD_FAST_LOAD_FAST
      case LOAD_FAST_LOAD_FAST:
#endif
        return INT_MAX;
      case SWAP:
        return d - in.arg;
      default:
        break;
    }
    int lowest = d - 1;
    for (bool jump : {false, true}) {
      if (jump && in.jump_target < 0) continue;
      int e = PyCompile_OpcodeStackEffectWithJump(in.opcode, in.arg, jump ? 1 : 0);
      if (e == PY_INVALID_STACK_EFFECT) return 0;
      // Popping only (no result) starts at the new top; else one value is replaced too.
      lowest = std::min(lowest, pushes_nothing(in.opcode) ? d + e : d + std::min(e, 0) - 1);
    }
    return lowest;
  }
  const Handler& handler(int i) const { return handlers_[i]; }
  // Successors by normal control flow (fall-through, jump target).
  std::vector<int> next(int i) const {
    std::vector<int> out;
    const auto& in = bc_.insts[i];
    if (in.jump_target >= 0) out.push_back(in.jump_target);
    if (!ends_flow(in.opcode) && i + 1 < n_) out.push_back(i + 1);
    return out;
  }

 private:
  int effect(int i, bool jump) const {
    const auto& in = bc_.insts[i];
    if (in.opcode == RETURN_GENERATOR) throw CannotResume("a loop in a generator");
    int e = PyCompile_OpcodeStackEffectWithJump(in.opcode, in.arg, jump ? 1 : 0);
    if (e == PY_INVALID_STACK_EFFECT)
      throw CannotResume(std::string("no stack effect for ") + opcode_name(in.opcode));
    return e;
  }

  void reach(int i, int d, std::deque<int>& work) {
    if (i < 0 || i >= n_ || d < 0) throw CannotResume("malformed control flow");
    if (depth_[i] < 0) {
      depth_[i] = d;
      work.push_back(i);
    } else if (depth_[i] != d) {
      throw CannotResume("an instruction reached with two stack depths");
    }
  }

  void depths() {
    depth_.assign(n_, -1);
    std::deque<int> work;
    reach(0, 0, work);
    while (!work.empty()) {
      int i = work.front();
      work.pop_front();
      const auto& in = bc_.insts[i];
      if (handlers_[i].index >= 0) reach(handlers_[i].index, handlers_[i].depth, work);
      if (in.jump_target >= 0) reach(in.jump_target, depth_[i] + effect(i, true), work);
      if (!ends_flow(in.opcode) && i + 1 < n_) reach(i + 1, depth_[i] + effect(i, false), work);
    }
  }

  const Bytecode& bc_;
  int n_;
  std::vector<Handler> handlers_;
  std::vector<int> depth_;
};

// Where control goes from a body instruction.
enum class To { Body, Continue, Exit };

struct Members {
  std::vector<bool> in;    // instruction is part of the body function
  std::vector<int> exits;  // exit targets, in order of discovery
};

class LoopAnalysis {
 public:
  // `exits_in_range`: code inside the loop's range that cannot reach the
  // head (a `return` 3.12 copied to a `break`) may be an exit too.
  LoopAnalysis(const Flow& flow, const LoopBody& loop, int last, bool exits_in_range)
      : flow_(flow), loop_(loop), last_(last), exits_in_range_(exits_in_range) {
    // The bridge calls the body just before the entry: the handler covering
    // both neighbours of that spot (if any) catches what leaves the body.
    if (loop.entry > 0 && flow.handler(loop.entry - 1).index == flow.handler(loop.entry).index)
      outer_handler_ = flow.handler(loop.entry).index;
    reaches_head();
    members();
  }

  const Members& m() const { return m_; }
  To where(int t) const {
    if (t == loop_.head) return To::Continue;
    return m_.in[t] ? To::Body : To::Exit;
  }
  int exit_index(int t) const {
    auto it = std::find(m_.exits.begin(), m_.exits.end(), t);
    TL_CHECK(it != m_.exits.end()) << "instruction " << t << " is not an exit";
    return static_cast<int>(it - m_.exits.begin());
  }
  // True when instruction i's exception goes to a handler in the body (not
  // to one around the loop, which the bridge's own table has).
  bool keeps_handler(int i) const {
    const Handler& h = flow_.handler(i);
    return h.index >= 0 && h.index != outer_handler_;
  }
  int outer_handler() const { return outer_handler_; }

 private:
  // Instructions from which the head can be reached without passing it: the
  // loop proper, wherever the compiler placed its blocks (3.12 moves except
  // handlers after the function's last line).
  void reaches_head() {
    const int n = flow_.size();
    std::vector<std::vector<int>> preds(n);
    for (int i = 0; i < n; ++i) {
      if (flow_.depth(i) < 0) continue;
      for (int s : flow_.next(i)) preds[s].push_back(i);
      if (flow_.handler(i).index >= 0) preds[flow_.handler(i).index].push_back(i);
    }
    loop_part_.assign(n, false);
    std::deque<int> work{loop_.head};
    while (!work.empty()) {
      int i = work.front();
      work.pop_front();
      for (int p : preds[i])
        if (p != loop_.head && !loop_part_[p]) loop_part_[p] = true, work.push_back(p);
    }
  }

  // A successor outside the loop whose stack is part of the stack below the
  // loop is an exit: the bridge goes on there. Anything else still needs
  // values the body made (a `return` block that 3.12 placed after the loop,
  // with the iterator on the stack) and joins the body.
  bool is_exit(int t) const {
    bool in_range = t >= loop_.head && t <= last_;
    return (exits_in_range_ || !in_range) && !loop_part_[t] && !forced_[t] &&
           flow_.depth(t) <= static_cast<int>(loop_.outer.size());
  }

  // The bridge can go on at an exit only with its own stack: every value
  // there must still be the one below the loop. Exits where a path changed
  // one (a `return` inside a with-block around the loop swaps its __exit__
  // out) join the body instead, until no exit changes.
  void members() {
    forced_.assign(flow_.size(), false);
    do explore();
    while (force_changed_exits());
  }

  bool force_changed_exits() {
    const int n = flow_.size();
    std::vector<int> intact(n, INT_MAX);
    std::vector<bool> queued(n, false);
    std::deque<int> work;
    auto reach = [&](int t, int k) {
      if (t == loop_.head || k >= intact[t]) return;
      intact[t] = k;
      if (m_.in[t] && !queued[t]) queued[t] = true, work.push_back(t);
    };
    reach(loop_.entry, static_cast<int>(loop_.outer.size()) + (loop_.is_for ? 1 : 0));
    while (!work.empty()) {
      int i = work.front();
      work.pop_front();
      queued[i] = false;
      int k = std::min(intact[i], flow_.touched_from(i));
      for (int t : flow_.next(i)) reach(t, k);
      if (keeps_handler(i))
        reach(flow_.handler(i).index, std::min(intact[i], flow_.handler(i).kept));
    }
    bool changed = false;
    for (int t : m_.exits)
      if (intact[t] < flow_.depth(t)) forced_[t] = true, changed = true;
    return changed;
  }

  void explore() {
    const int n = flow_.size();
    m_.in.assign(n, false);
    m_.exits.clear();
    std::deque<int> work{loop_.entry};
    m_.in[loop_.entry] = true;
    auto visit = [&](int t) {
      if (t == loop_.head || m_.in[t]) return;
      if (is_exit(t)) {
        if (std::find(m_.exits.begin(), m_.exits.end(), t) == m_.exits.end()) m_.exits.push_back(t);
        return;
      }
      m_.in[t] = true;
      work.push_back(t);
    };
    while (!work.empty()) {
      int i = work.front();
      work.pop_front();
      if (flow_.depth(i) < 0) throw CannotResume("unreachable loop body");
      for (int s : flow_.next(i)) visit(s);
      if (keeps_handler(i)) {
        int h = flow_.handler(i).index;
        if (h == loop_.head || is_exit(h)) throw CannotResume("exception handler outside the loop");
        visit(h);
      }
    }
    for (int t : m_.exits)
      if (m_.in[t]) throw CannotResume("an exit that is also in the body");
  }

  const Flow& flow_;
  const LoopBody& loop_;
  int last_;
  bool exits_in_range_;
  int outer_handler_ = -1;
  std::vector<bool> loop_part_;
  std::vector<bool> forced_;  // exits that join the body
  Members m_;
};

// Must-bound locals over the body: every read of a local that the head did
// not bind must follow an assignment on every path. 3.12's inlined
// comprehensions save a local on the stack (LOAD_FAST_AND_CLEAR) and store it
// back after the comprehension, unbound again if it was: the saved slot is
// tracked by its stack position.
class Binding {
 public:
  Binding(const Bytecode& bc, const Flow& flow, const LoopAnalysis& a, int nlocals,
          const std::vector<int>& params, int entry)
      : bc_(bc), flow_(flow), a_(a), nlocals_(nlocals) {
    State start;
    start.set = true;
    start.must.assign(nlocals, false);
    for (int p : params) start.must[p] = true;
    in_.assign(flow.size(), State{});
    solve(start, entry);
  }

  std::vector<int> assigned() const { return {stored_.begin(), stored_.end()}; }

 private:
  struct State {
    bool set = false;
    std::vector<bool> must;
    std::map<int, std::pair<int, bool>> saved;  // stack position -> (local, was bound)
  };

  bool merge(State& into, const State& s) {
    if (!into.set) {
      into = s;
      return true;
    }
    if (into.saved != s.saved) throw CannotResume("a comprehension's saved local differs by path");
    bool changed = false;
    for (int i = 0; i < nlocals_; ++i)
      if (into.must[i] && !s.must[i]) into.must[i] = false, changed = true;
    return changed;
  }

  int local_of(const Instruction& in) const {
    if (in.arg < 0 || in.arg >= nlocals_) throw CannotResume("a loop that uses a cell variable");
    return in.arg;
  }

  static bool pure_push(int opcode) {
    switch (opcode) {
      case LOAD_FAST:
      case LOAD_CONST:
      case LOAD_GLOBAL:
      case LOAD_DEREF:
      case PUSH_NULL:
      case NOP:
      case RESUME:
#ifdef LOAD_FAST_CHECK
      case LOAD_FAST_CHECK:
#endif
#ifdef LOAD_FAST_AND_CLEAR
      case LOAD_FAST_AND_CLEAR:
#endif
        return true;
      default:
        return false;
    }
  }

  // State after instruction i; `check` raises on a read of a maybe-unbound local.
  State step(int i, State s, bool check) { return step_at(bc_.insts[i], flow_.depth(i), s, check); }

  // The same for an instruction entered with `d` values on the stack.
  State step_at(const Instruction& in, int d, State s, bool check) {
    unsigned flags = opcode_flags(in.opcode);
    if (flags & kLocalPair) {
      // A 3.13 superinstruction: its two halves in turn.
      auto [op1, op2] = Rewriter::split_pair(in.opcode);
      Instruction first = in, second = in;
      first.opcode = op1, first.arg = in.arg >> 4;
      second.opcode = op2, second.arg = in.arg & 15;
      s = step_at(first, d, std::move(s), check);
      return step_at(second, op1 == LOAD_FAST ? d + 1 : d - 1, std::move(s), check);
    }
    switch (in.opcode) {
      case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
      case LOAD_FAST_CHECK:
#endif
        if (check && !s.must[local_of(in)])
          throw CannotResume("a local the loop body may read before assigning it");
        return s;
      case STORE_FAST: {
        int x = local_of(in);
        stored_.insert(x);
        auto it = s.saved.find(d - 1);
        if (it != s.saved.end()) {
          if (it->second.first != x) throw CannotResume("a saved local stored elsewhere");
          s.must[x] = it->second.second;  // the comprehension restores what was there
          s.saved.erase(it);
        } else {
          s.must[x] = true;
        }
        return s;
      }
      case DELETE_FAST:
        throw CannotResume("`del` of a local in the loop body");
#ifdef LOAD_FAST_AND_CLEAR
      case LOAD_FAST_AND_CLEAR: {
        int x = local_of(in);
        s.saved[d] = {x, s.must[x]};
        s.must[x] = false;
        return s;
      }
#endif
      case SWAP: {
        auto node_top = s.saved.extract(d - 1), node_deep = s.saved.extract(d - in.arg);
        if (node_top) node_top.key() = d - in.arg, s.saved.insert(std::move(node_top));
        if (node_deep) node_deep.key() = d - 1, s.saved.insert(std::move(node_deep));
        return s;
      }
      case POP_TOP:
        s.saved.erase(d - 1);
        return s;
      default:
        break;
    }
    if (flags & (kLocal | kFree)) {
      if (in.opcode != LOAD_DEREF && in.opcode != STORE_DEREF)  // free variables: the same closure
        throw CannotResume(std::string("the loop body uses ") + opcode_name(in.opcode));
    }
    if (!s.saved.empty() && !pure_push(in.opcode)) {
      int after = d + PyCompile_OpcodeStackEffectWithJump(in.opcode, in.arg, 0);
      int lowest = std::min(d, after) - 1;
      if (in.opcode == COPY) lowest = d - in.arg;
      if (s.saved.lower_bound(lowest) != s.saved.end())
        throw CannotResume("a comprehension's saved local used by another instruction");
    }
    return s;
  }

  void solve(const State& start, int entry) {
    std::deque<int> work;
    std::vector<bool> queued(flow_.size(), false);
    auto push = [&](int i, const State& st) {
      if (merge(in_[i], st) && !queued[i]) queued[i] = true, work.push_back(i);
    };
    push(entry, start);
    while (!work.empty()) {
      int i = work.front();
      work.pop_front();
      queued[i] = false;
      propagate(i, false, push);
    }
    // Reads are checked once the states are final (a first visit may see
    // more bound locals than a later merge leaves).
    for (int i = 0; i < flow_.size(); ++i)
      if (a_.m().in[i] && in_[i].set) propagate(i, true, [](int, const State&) {});
  }

  template <typename Push>
  void propagate(int i, bool check, Push push) {
    const Members& m = a_.m();
    State out = step(i, in_[i], check);
    const auto& in = bc_.insts[i];
    if (check && is_return(in.opcode) && !out.saved.empty())
      throw CannotResume("`return` inside a comprehension");
    std::vector<int> normal;
    if (in.jump_target >= 0) normal.push_back(in.jump_target);
    if (!ends_flow(in.opcode) && i + 1 < flow_.size()) normal.push_back(i + 1);
    for (int t : normal) {
      if (a_.where(t) == To::Body) {
        push(t, out);
      } else if (check && !out.saved.empty()) {
        throw CannotResume("control leaves the loop body inside a comprehension");
      }
    }
    if (a_.keeps_handler(i)) {
      State h = in_[i];
      const Handler& hd = flow_.handler(i);
      for (auto it = h.saved.begin(); it != h.saved.end();)
        it = it->first >= hd.kept ? h.saved.erase(it) : std::next(it);
      if (m.in[hd.index]) push(hd.index, h);
    }
  }

  const Bytecode& bc_;
  const Flow& flow_;
  const LoopAnalysis& a_;
  int nlocals_;
  std::vector<State> in_;
  std::set<int> stored_;
};

}  // namespace

LoopShape analyze_loop(const Bytecode& bc, const LoopBody& loop, int last, int nlocals) {
  Flow flow(bc);
  if (flow.depth(loop.head) != static_cast<int>(loop.outer.size()) + (loop.is_for ? 1 : 0))
    throw CannotResume("the stack at the loop head differs from the trace's");
  // Code in the loop that only leaves it stays in the body (compiled) when
  // it can; 3.12's copies of the code after a loop at its `break`s may read
  // locals only an earlier iteration assigned: those become exits.
  std::optional<LoopAnalysis> analysis;
  std::optional<Binding> binding;
  for (bool exits_in_range : {false, true}) {
    analysis.emplace(flow, loop, last, exits_in_range);
    try {
      binding.emplace(bc, flow, *analysis, nlocals, loop.params, loop.entry);
      break;
    } catch (const CannotResume&) {
      if (exits_in_range) throw;
    }
  }
  LoopShape out;
  for (int i = 0; i < flow.size(); ++i) out.depth.push_back(flow.depth(i));
  out.member = analysis->m().in;
  out.exits = analysis->m().exits;
  out.assigned = binding->assigned();
  out.outer_handler = analysis->outer_handler();
  return out;
}

}  // namespace tl::bytecode
