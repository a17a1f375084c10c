// assemble(lift(decode(code))) must give back the compiler's own bytes: the
// same co_code, exception table and stack size, the same line of every code
// unit, and functions that return and raise the same as the originals.
#include <catch2/catch.hpp>
#include <string>

#include "bytecode/assembler.h"
#include "bytecode/decode.h"
#include "bytecode/opcode_tables.h"
#include "py_module.h"

using tl::PyRef;
using tl::testing::code_of;
using tl::testing::obj;
using tl::testing::PyModule;
namespace bc = tl::bytecode;

namespace {

const char* kHelpers = R"PY(
import dis, inspect, io, types

def merged_lines(code):
    out = []
    for s, e, l in code.co_lines():
        if out and out[-1][2] == l and out[-1][1] == s:
            out[-1] = (out[-1][0], e, l)
        else:
            out.append((s, e, l))
    return out

def module_code(name):
    import importlib
    path = importlib.import_module(name).__file__
    with open(path) as f:
        return compile(f.read(), path, 'exec')

def dis_text(code):
    f = io.StringIO()
    dis.dis(code, file=f, depth=0)
    return f.getvalue()

def outcome(f, args, kwargs):
    try:
        r = f(*args, **kwargs)
        return ('ok', list(r) if inspect.isgenerator(r) else r)
    except Exception as e:
        return ('raise', type(e), str(e))

def compare_behaviour(orig, new_code, cases):
    new = types.FunctionType(new_code, orig.__globals__, orig.__name__, orig.__defaults__,
                             orig.__closure__)
    new.__kwdefaults__ = orig.__kwdefaults__
    bad = []
    for args, kwargs in cases:
        a, b = outcome(orig, args, kwargs), outcome(new, args, kwargs)
        if a != b:
            bad.append('%s%r%r: %r != %r' % (orig.__name__, args, kwargs, a, b))
    return bad
)PY";

const char* kCorpus = R"PY(
G = 10

def straight(a, b=2):
    c = a * b + G
    d = (c - a) / b if b else -1
    return c, d, a is None, not a, f"{a!r}-{b:>3}"

def loops(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        if i > 20:
            break
        total += i
    else:
        total = -total
    k = n
    while k > 0:
        k -= 2
        if k == 3:
            break
    return total, k

def nested_loops(n):
    out = []
    for i in range(n):
        for j in range(i):
            if (i + j) % 2:
                continue
            if j > 4:
                break
            out.append((i, j))
    return out

def handlers(x):
    log = []
    try:
        try:
            y = 10 // x
        except ZeroDivisionError as e:
            log.append(str(e))
            y = None
        except TypeError:
            raise ValueError("bad type")
        else:
            log.append("else")
        finally:
            log.append("finally")
    except ValueError as e:
        return "outer", str(e), log
    return y, log

class Ctx:
    def __init__(self, log, swallow=False):
        self.log, self.swallow = log, swallow
    def __enter__(self):
        self.log.append("enter")
        return self
    def __exit__(self, *exc):
        self.log.append("exit %s" % (exc[0].__name__ if exc[0] else None))
        return self.swallow

def withs(x):
    log = []
    with Ctx(log) as a, Ctx(log, swallow=True):
        log.append(1 // x)
    with Ctx(log):
        if x > 5:
            return log
        log.append(len(x))
    return log

def comps(xs):
    a = [x * 2 for x in xs if x]
    b = {x: [y for y in range(x)] for x in xs}
    c = sorted({x % 3 for x in xs})
    d = list(x + 1 for x in xs)
    return a, b, c, d

def closures(x):
    counter = 0
    def inc(step=1):
        nonlocal counter
        counter += step
        return counter + x
    inc(); inc(2)
    return inc(3), counter, (lambda: x * 2)()

def kwcalls(a, *, scale=1, **extra):
    def f(p, q=0, *, r=1):
        return p * q + r
    return f(a, q=scale, r=2), sorted(dict(extra, z=a).items()), max(a, scale, key=abs)

def star(*args, **kwargs):
    def g(*a, **k):
        return len(a), sorted(k)
    return g(*args, 1, *args, **kwargs), g(**kwargs, extra=1), args[::-1]

def gen(n):
    for i in range(n):
        if i == 2:
            continue
        yield i * i
    yield from range(2)

def matching(v):
    match v:
        case [1, *rest]: return rest
        case {"k": k}: return k
        case int() if v > 3: return v
        case _: return None

# 300 statements between a test and its target and inside a loop: jumps both
# ways need EXTENDED_ARG, as do the 300 constants and the exception ranges.
_src = ["def big(x, n):", "    acc = 0", "    for i in range(n):", "        try:",
        "            if x > i:"]
_src += ["                acc = acc + x * i + %d" % k for k in range(300)]
_src += ["        except TypeError:", "            acc = -1", "            break",
         "    return acc"]
exec("\n".join(_src))

CASES = {
    'straight': [((1,), {}), ((3, 0), {}), ((None,), {}), (('ab',), {'b': 3})],
    'loops': [((0,), {}), ((7,), {}), ((30,), {}), (('x',), {})],
    'nested_loops': [((0,), {}), ((9,), {})],
    'handlers': [((2,), {}), ((0,), {}), (('a',), {})],
    'withs': [((1,), {}), ((0,), {}), ((9,), {})],
    'comps': [(([0, 1, 2, 5],), {}), (([],), {}), ((None,), {})],
    'closures': [((1,), {}), ((2.5,), {}), (('s',), {})],
    'kwcalls': [((3,), {}), ((-4,), {'scale': 2, 'k': 1}), (('a',), {})],
    'star': [((), {}), ((1, 2), {'a': 3}), ((), {'extra': 2})],
    'gen': [((0,), {}), ((5,), {}), ((None,), {})],
    'matching': [(([1, 2, 3],), {}), (({'k': 7},), {}), ((9,), {}), ((2,), {})],
    'big': [((2, 3), {}), ((1, 0), {}), (('a', 2), {}), ((5, None), {})],
}
)PY";

const PyModule& helpers() {
  static const PyModule m(kHelpers);
  return m;
}

std::string qualname(PyCodeObject* code) { return PyUnicode_AsUTF8(code->co_qualname); }

bool equal(PyObject* a, PyObject* b) {  // borrows both
  int r = PyObject_RichCompareBool(a, b, Py_EQ);
  if (r < 0) PyErr_Print();
  REQUIRE(r >= 0);
  return r == 1;
}

// Round-trips `code` (borrowed) and, first, every code object among its
// constants, checking each against its original. Returns a new reference.
PyRef round_trip(PyCodeObject* code, int& checked) {
  bc::CodeSpec spec = bc::spec_of(code);
  const Py_ssize_t n = PyTuple_GET_SIZE(spec.consts.get());
  PyRef consts = PyRef::steal(PyTuple_New(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* c = PyTuple_GET_ITEM(spec.consts.get(), i);  // borrowed
    PyRef item = PyCode_Check(c) ? round_trip(reinterpret_cast<PyCodeObject*>(c), checked)
                                 : PyRef::borrow(c);
    PyTuple_SET_ITEM(consts.get(), i, item.release());
  }
  spec.consts = consts;
  PyRef fresh = bc::assemble(bc::lift(tl::bytecode::decode(code)), spec);
  auto* copy = reinterpret_cast<PyCodeObject*>(fresh.get());
  INFO("code object " << qualname(code));
  PyRef want = PyRef::steal(PyCode_GetCode(code)), got = PyRef::steal(PyCode_GetCode(copy));
  if (!equal(want.get(), got.get())) {
    FAIL_CHECK("co_code differs\n"
               << helpers().call_str("dis_text", obj(code)) << "---\n"
               << helpers().call_str("dis_text", obj(copy)));
  }
  CHECK(equal(code->co_exceptiontable, copy->co_exceptiontable));
  CHECK(code->co_stacksize == copy->co_stacksize);
  CHECK(helpers().call_str("merged_lines", obj(code)) ==
        helpers().call_str("merged_lines", obj(copy)));
  CHECK(equal(code->co_localsplusnames, copy->co_localsplusnames));
  CHECK(code->co_flags == copy->co_flags);
  ++checked;
  return fresh;
}

}  // namespace

TEST_CASE("round-tripped corpus functions keep their bytes, tables and behaviour", "[bytecode]") {
  PyModule corpus(kCorpus);
  PyObject* cases = corpus.get("CASES");
  PyObject *name, *inputs;  // borrowed from CASES
  int checked = 0;
  for (Py_ssize_t pos = 0; PyDict_Next(cases, &pos, &name, &inputs);) {
    const char* fn_name = PyUnicode_AsUTF8(name);
    SECTION(fn_name) {
      PyObject* fn = corpus.get(fn_name);
      PyRef fresh = round_trip(code_of(fn), checked);
      PyRef bad = helpers().call("compare_behaviour", fn, fresh.get(), inputs);
      PyRef text = PyRef::steal(PyObject_Str(bad.get()));
      INFO(PyUnicode_AsUTF8(text.get()));
      CHECK(PyList_GET_SIZE(bad.get()) == 0);
      CHECK(checked >= 1);
    }
  }
}

TEST_CASE("every code object of large standard-library modules round-trips exactly", "[bytecode]") {
  // Generators, coroutines, async comprehensions, classes and match statements
  // that the corpus does not spell out, as the compiler really emits them.
  for (const char* module :
       {"inspect", "typing", "argparse", "asyncio.base_events", "dataclasses"}) {
    INFO("module " << module);
    PyRef name = PyRef::steal(PyUnicode_FromString(module));
    PyRef code = helpers().call("module_code", name.get());
    int checked = 0;
    round_trip(reinterpret_cast<PyCodeObject*>(code.get()), checked);
    CHECK(checked > 50);
  }
}

TEST_CASE("the large corpus function really needs EXTENDED_ARG on jumps both ways", "[bytecode]") {
  PyModule corpus(kCorpus);
  tl::bytecode::Bytecode decoded = tl::bytecode::decode(code_of(corpus.get("big")));
  bool forward = false, backward = false;
  for (const tl::bytecode::Instruction& in : decoded.insts) {
    unsigned flags = tl::bytecode::opcode_flags(in.opcode);
    if (!(flags & tl::bytecode::kJump) || in.arg <= 255) continue;
    (flags & tl::bytecode::kBackward ? backward : forward) = true;
  }
  CHECK(forward);
  CHECK(backward);
}

TEST_CASE("lift labels every instruction and maps the exception table onto them", "[bytecode]") {
  PyModule corpus(kCorpus);
  tl::bytecode::Bytecode decoded = tl::bytecode::decode(code_of(corpus.get("handlers")));
  bc::Assembly a = bc::lift(decoded);
  REQUIRE(a.insts.size() == decoded.insts.size());
  REQUIRE(a.blocks.size() == decoded.exception_table.size());
  for (size_t i = 0; i < a.insts.size(); ++i) {
    CHECK(a.insts[i].label == static_cast<int>(i));
    CHECK(a.insts[i].target == decoded.insts[i].jump_target);
  }
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    const tl::bytecode::ExceptionTableEntry& e = decoded.exception_table[i];
    CHECK(decoded.insts[a.blocks[i].first].offset == e.start);
    CHECK(decoded.insts[a.blocks[i].last].next_offset == e.end);
    CHECK(decoded.insts[a.blocks[i].handler].offset == e.target);
  }
}
