#include "chat_template/interpreter.hpp"

#include <cmath>
#include <exception>
#include <new>

#include "chat_template/builtins.hpp"
#include "chat_template/text.hpp"

namespace flashscope::chat_template {
namespace {

using ast::Body;
using ast::Expr;
using ast::ExprKind;
using ast::Node;
using ast::NodeKind;

// How a statement ended: normally, or by {% break %} / {% continue %}.
enum class Flow { kNormal, kBreak, kContinue };

[[noreturn]] void fail_undefined(const Value& v) {
  fail(v.s.empty() ? std::string("an undefined value was used") : "'" + v.s + "' is undefined");
}

int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }
bool is_integral(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
double as_double(const Value& v) { return v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v)); }

// Python's slice.indices(): clamps start/stop for a sequence of `len` items.
void slice_indices(int64_t len, const Value* start, const Value* stop, const Value* step, int64_t* b, int64_t* e,
                   int64_t* s) {
  *s = step ? as_int(*step) : 1;
  if (*s == 0) fail("slice step cannot be zero");
  auto clamp = [&](const Value* v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = as_int(*v);
    if (x < 0) x += len;
    if (x < 0) return *s < 0 ? int64_t{-1} : int64_t{0};
    if (x >= len) return *s < 0 ? len - 1 : len;
    return x;
  };
  *b = clamp(start, *s < 0 ? len - 1 : 0);
  *e = clamp(stop, *s < 0 ? int64_t{-1} : len);
}

class Interpreter {
 public:
  Interpreter(const Program& program, Map globals, const std::function<std::tm()>& now)
      : program_(program), limits_(program.limits), budget_{program.limits}, now_(now) {
    scopes_.push_back(std::move(globals));
    scopes_.emplace_back();  // the template's own top level
  }

  std::string run() {
    std::string out;
    out_ = &out;
    render(program_.body);
    return out;
  }

 private:
  // --- statements -----------------------------------------------------
  Flow render(const Body& body) {
    for (const Node& n : body) {
      const Flow f = exec(n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Node& n) {
    try {
      return exec_node(n);
    } catch (RenderError& e) {
      if (e.line == 0) {
        e.line = n.pos.line;
        e.column = n.pos.column;
      }
      throw;
    }
  }

  void emit(std::string_view s) {
    out_->append(s);
    if (out_->size() > limits_.max_output_bytes) {
      fail("the output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
    }
  }

  Flow exec_node(const Node& n) {
    switch (n.kind) {
      case NodeKind::kText: emit(n.text); return Flow::kNormal;
      case NodeKind::kOutput: emit(to_str(eval(*n.expr))); return Flow::kNormal;
      case NodeKind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || truthy(eval(*cond))) return render(body);
        }
        return Flow::kNormal;
      case NodeKind::kFor: exec_for(n); return Flow::kNormal;
      case NodeKind::kSet: {
        Value v = eval(*n.expr);
        if (!n.attr.empty()) {
          Value target = lookup(n.targets[0]);
          if (target.kind != Kind::kNamespace) {
            fail("cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
          }
          set_entry(*target.map, n.attr, std::move(v));
        } else {
          assign_targets(n.targets, std::move(v));
        }
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: assign(n.targets[0], Value::string(capture(n.body))); return Flow::kNormal;
      case NodeKind::kMacro: {
        Value m;
        m.kind = Kind::kMacro;
        m.macro = n.macro.get();
        assign(n.macro->name, std::move(m));
        return Flow::kNormal;
      }
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      case NodeKind::kBlock: {
        // jinja2 runs the body as a call block: its `set`s stay inside.
        scopes_.emplace_back();
        const Flow f = render(n.body);
        scopes_.pop_back();
        return f;
      }
    }
    return Flow::kNormal;
  }

  // Every value an expression produces is work: its bytes (a list's or
  // dict's entries at 8 each) plus a fixed cost per evaluation. The total
  // bounds a render's time, which loop and size limits alone do not: a
  // loop may scan a large string on each of its iterations.
  void charge(const Value& v) {
    size_t cost = 16;
    if (v.kind == Kind::kString) cost += v.s.size();
    else if (v.kind == Kind::kList) cost += 8 * v.list->size();
    else if (v.is_mapping()) cost += 8 * v.map->size();
    work_ += cost;
    if (work_ > limits_.max_work_bytes) {
      fail("the render's work exceeds the limit of " + std::to_string(limits_.max_work_bytes) +
           " bytes (max_work_bytes)");
    }
  }

  void count_iteration() {
    if (++iterations_ > limits_.max_loop_iterations) {
      fail("loop iterations exceed the limit of " + std::to_string(limits_.max_loop_iterations));
    }
  }

  void exec_for(const Node& n) {
    List items = iterate(eval(*n.expr));
    for (const Value& item : items) charge(item);  // the loop holds copies of them
    if (n.filter) {
      // jinja2 filters first, so loop.length and loop.last count only what passes.
      List kept;
      for (Value& item : items) {
        count_iteration();
        scopes_.emplace_back();
        assign_targets(n.targets, item);
        const bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      count_iteration();
      scopes_.emplace_back();
      assign_targets(n.targets, items[static_cast<size_t>(k)]);
      Map loop = {{"index", Value::integer(k + 1)},
                  {"index0", Value::integer(k)},
                  {"revindex", Value::integer(len - k)},
                  {"revindex0", Value::integer(len - k - 1)},
                  {"first", Value::boolean(k == 0)},
                  {"last", Value::boolean(k == len - 1)},
                  {"length", Value::integer(len)},
                  {"depth", Value::integer(1)},
                  {"depth0", Value::integer(0)}};
      if (k > 0) loop.emplace_back("previtem", items[static_cast<size_t>(k - 1)]);
      if (k + 1 < len) loop.emplace_back("nextitem", items[static_cast<size_t>(k + 1)]);
      assign("loop", Value::make_map(std::move(loop)));
      const Flow f = render(n.body);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    if (len == 0) render(n.else_body);
  }

  std::string capture(const Body& body) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    render(body);
    out_ = saved;
    return buffer;
  }

  // --- variables ------------------------------------------------------
  static void set_entry(Map& map, const std::string& key, Value v) {
    for (auto& e : map) {
      if (e.first == key) {
        e.second = std::move(v);
        return;
      }
    }
    map.emplace_back(key, std::move(v));
  }

  void assign(const std::string& name, Value v) { set_entry(scopes_.back(), name, std::move(v)); }

  void assign_targets(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      assign(targets[0], v);
      return;
    }
    const List items = iterate(v);
    if (items.size() != targets.size()) {
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) +
           " names");
    }
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], items[k]);
  }

  Value lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      if (const Value* v = map_find(*scope, name)) return *v;
    }
    if (is_global_function(name)) return Value::builtin(name);
    return Value::undefined(name);
  }

  // --- expressions ----------------------------------------------------
  Value eval(const Expr& e) {
    try {
      Value v = eval_expr(e);
      charge(v);
      return v;
    } catch (RenderError& err) {
      if (err.line == 0) {
        err.line = e.pos.line;
        err.column = e.pos.column;
      }
      throw;
    }
  }

  Value eval_expr(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: return lookup(e.name);
      case ExprKind::kList: {
        List items;
        items.reserve(e.args.size());
        for (const auto& a : e.args) items.push_back(eval(*a));
        return e.tuple ? Value::make_tuple(std::move(items)) : Value::make_list(std::move(items));
      }
      case ExprKind::kDict: {
        Map entries;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (!key.is_string()) fail("dict keys must be strings here, not " + type_name(key));
          set_entry(entries, key.s, eval(*e.args[k + 1]));
        }
        return Value::make_map(std::move(entries));
      }
      case ExprKind::kAttr: return get_attr(eval(*e.args[0]), e.name);
      case ExprKind::kIndex: return get_item(eval(*e.args[0]), eval(*e.args[1]));
      case ExprKind::kSlice: return slice(e);
      case ExprKind::kCall: return call(e);
      case ExprKind::kFilter: {
        Value target = eval(*e.args[0]);
        return call_filter(e.name, target, eval_args(e), budget_);
      }
      case ExprKind::kTest: {
        Value target = eval(*e.args[0]);
        return Value::boolean(call_test(e.name, target, eval_args(e)) != e.negated);
      }
      case ExprKind::kUnary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.kind == Kind::kBool ? Value::integer(v.b) : v;
        if (v.kind == Kind::kFloat) return Value::real(-v.f);
        if (as_int(v) == INT64_MIN) fail("integer overflow");
        return Value::integer(-as_int(v));
      }
      case ExprKind::kBinary: {
        if (e.name == "and" || e.name == "or") {
          Value l = eval(*e.args[0]);
          if (truthy(l) == (e.name == "or")) return l;
          return eval(*e.args[1]);
        }
        Value l = eval(*e.args[0]);
        Value r = eval(*e.args[1]);
        return arithmetic(e.name, l, r);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCondition:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined();
    }
    return Value::undefined();
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs call;
    call.args.reserve(e.args.size());
    for (size_t k = 1; k < e.args.size(); ++k) call.args.push_back(eval(*e.args[k]));
    for (const auto& [key, value] : e.kwargs) call.kwargs.emplace_back(key, eval(*value));
    return call;
  }

  // obj.name: a dict's key, a namespace's attribute; jinja2's Undefined for
  // anything missing, and an error when obj itself is undefined.
  static Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.is_mapping()) {
      if (const Value* v = map_find(*obj.map, name)) return *v;
    }
    return Value::undefined(name);
  }

  static Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.is_mapping()) {
      if (key.is_string()) {
        if (const Value* v = map_find(*obj.map, key.s)) return *v;
      }
      return Value::undefined(key.is_string() ? key.s : to_str(key));
    }
    if (!is_integral(key)) return Value::undefined(to_str(key));
    if (obj.kind == Kind::kList) {
      int64_t k = as_int(key);
      const auto len = static_cast<int64_t>(obj.list->size());
      if (k < 0) k += len;
      if (k < 0 || k >= len) return Value::undefined("[" + std::to_string(as_int(key)) + "]");
      return (*obj.list)[static_cast<size_t>(k)];
    }
    if (obj.is_string()) {
      const auto cps = text::decode(obj.s);
      int64_t k = as_int(key);
      const auto len = static_cast<int64_t>(cps.size());
      if (k < 0) k += len;
      if (k < 0 || k >= len) return Value::undefined("[" + std::to_string(as_int(key)) + "]");
      return Value::string(text::encode(cps, static_cast<size_t>(k), static_cast<size_t>(k) + 1));
    }
    return Value::undefined(to_str(key));
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    Value bounds[3];
    const Value* p[3] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[static_cast<size_t>(k) + 1]) continue;
      bounds[k] = eval(*e.args[static_cast<size_t>(k) + 1]);
      if (bounds[k].kind == Kind::kNone) continue;
      if (!is_integral(bounds[k])) fail("slice indices must be integers, not " + type_name(bounds[k]));
      p[k] = &bounds[k];
    }
    if (obj.is_undefined()) fail_undefined(obj);
    std::vector<uint32_t> cps;
    int64_t len = 0;
    if (obj.kind == Kind::kList) len = static_cast<int64_t>(obj.list->size());
    else if (obj.is_string()) len = static_cast<int64_t>((cps = text::decode(obj.s)).size());
    else fail("'" + type_name(obj) + "' object is not subscriptable");
    int64_t b = 0, end = 0, step = 1;
    slice_indices(len, p[0], p[1], p[2], &b, &end, &step);
    List items;
    std::string s;
    for (int64_t k = b; step > 0 ? k < end : k > end; k += step) {
      if (obj.kind == Kind::kList) items.push_back((*obj.list)[static_cast<size_t>(k)]);
      else text::append_utf8(s, cps[static_cast<size_t>(k)]);
    }
    if (obj.kind != Kind::kList) return Value::string(std::move(s));
    Value out = Value::make_list(std::move(items));
    out.tuple = obj.tuple;
    return out;
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == ExprKind::kAttr) {
      Value obj = eval(*callee.args[0]);
      if (obj.is_undefined()) fail_undefined(obj);
      if (callee.name == "cycle" && callee.args[0]->kind == ExprKind::kName && callee.args[0]->name == "loop" &&
          obj.kind == Kind::kMap) {
        // loop.cycle(a, b, ...): the argument at this iteration's index, round robin.
        const CallArgs call = eval_args(e);
        if (call.args.empty()) fail("loop.cycle() needs at least one argument");
        const Value* index0 = map_find(*obj.map, "index0");
        return call.args[static_cast<size_t>(index0 ? index0->i : 0) % call.args.size()];
      }
      if (obj.is_string() || obj.kind == Kind::kList || obj.kind == Kind::kMap) {
        return call_method(obj, callee.name, eval_args(e), budget_);
      }
      return call_value(get_attr(obj, callee.name), eval_args(e));
    }
    Value f = eval(callee);
    return call_value(f, eval_args(e));
  }

  Value call_value(const Value& f, const CallArgs& call) {
    switch (f.kind) {
      case Kind::kBuiltin: return call_global(f.s, call, budget_, now_);
      case Kind::kMacro: return call_macro(*f.macro, call);
      case Kind::kUndefined: fail_undefined(f);
      default: fail("'" + type_name(f) + "' object is not callable");
    }
  }

  Value call_macro(const ast::Macro& m, const CallArgs& call) {
    if (macro_depth_ >= limits_.max_depth) {
      fail("macro calls nest deeper than the limit of " + std::to_string(limits_.max_depth));
    }
    if (call.args.size() > m.params.size()) {
      fail("macro '" + m.name + "' takes " + std::to_string(m.params.size()) + " arguments, " +
           std::to_string(call.args.size()) + " given");
    }
    for (const auto& kw : call.kwargs) {
      bool known = false;
      for (const auto& p : m.params) known = known || p.first == kw.first;
      if (!known) fail("macro '" + m.name + "' has no argument '" + kw.first + "'");
    }
    // The body sees the template's globals and top level, then its arguments:
    // the caller's loop variables are not in its scope.
    std::vector<Map> caller_scopes(std::make_move_iterator(scopes_.begin() + 2),
                                   std::make_move_iterator(scopes_.end()));
    scopes_.resize(2);
    scopes_.emplace_back();
    for (size_t k = 0; k < m.params.size(); ++k) {
      const auto& [name, fallback] = m.params[k];
      if (k < call.args.size()) assign(name, call.args[k]);
      else if (const Value* v = map_find(call.kwargs, name)) assign(name, *v);
      else assign(name, fallback ? eval(*fallback) : Value::undefined(name));
    }
    ++macro_depth_;
    std::string out = capture(m.body);
    --macro_depth_;
    scopes_.resize(2);
    for (Map& scope : caller_scopes) scopes_.push_back(std::move(scope));
    return Value::string(std::move(out));
  }

  Value arithmetic(const std::string& op, const Value& l, const Value& r) {
    if (op == "~") {
      std::string s = to_str(l);
      s += to_str(r);
      budget_.check_size(s.size(), "a string");
      return Value::string(std::move(s));
    }
    if (l.is_undefined()) fail_undefined(l);
    if (r.is_undefined()) fail_undefined(r);
    const bool ints = is_integral(l) && is_integral(r);
    const bool numbers = l.is_number() && r.is_number();
    if (op == "+") {
      if (ints) {
        int64_t out = 0;
        if (__builtin_add_overflow(as_int(l), as_int(r), &out)) fail("integer overflow");
        return Value::integer(out);
      }
      if (numbers) return Value::real(as_double(l) + as_double(r));
      if (l.is_string() && r.is_string()) {
        budget_.check_size(l.s.size() + r.s.size(), "a string");
        return Value::string(l.s + r.s);
      }
      if (l.kind == Kind::kList && r.kind == Kind::kList) {
        budget_.check_size(l.list->size() + r.list->size(), "a list");
        if (l.tuple != r.tuple) fail("can only concatenate a list to a list and a tuple to a tuple");
        List items = *l.list;
        items.insert(items.end(), r.list->begin(), r.list->end());
        Value out = Value::make_list(std::move(items));
        out.tuple = l.tuple;
        return out;
      }
    } else if (op == "-") {
      if (ints) {
        int64_t out = 0;
        if (__builtin_sub_overflow(as_int(l), as_int(r), &out)) fail("integer overflow");
        return Value::integer(out);
      }
      if (numbers) return Value::real(as_double(l) - as_double(r));
    } else if (op == "*") {
      if (ints) {
        int64_t out = 0;
        if (__builtin_mul_overflow(as_int(l), as_int(r), &out)) fail("integer overflow");
        return Value::integer(out);
      }
      if (numbers) return Value::real(as_double(l) * as_double(r));
      const Value& seq = is_integral(l) ? r : l;
      const Value& count = is_integral(l) ? l : r;
      if (is_integral(count) && (seq.is_string() || seq.kind == Kind::kList)) {
        const int64_t n = std::max<int64_t>(0, as_int(count));
        const size_t unit = seq.is_string() ? seq.s.size() : seq.list->size();
        if (unit && static_cast<uint64_t>(n) > limits_.max_output_bytes / unit) {
          budget_.check_size(limits_.max_output_bytes + 1, seq.is_string() ? "a string" : "a list");
        }
        if (seq.is_string()) {
          std::string s;
          for (int64_t k = 0; k < n; ++k) s += seq.s;
          return Value::string(std::move(s));
        }
        List items;
        for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.list->begin(), seq.list->end());
        Value out = Value::make_list(std::move(items));
        out.tuple = seq.tuple;
        return out;
      }
    } else if (op == "/") {
      if (numbers) {
        if (as_double(r) == 0.0) fail("division by zero");
        return Value::real(as_double(l) / as_double(r));
      }
    } else if (op == "//" || op == "%") {
      if (ints) {
        const int64_t a = as_int(l), b = as_int(r);
        if (b == 0) fail("integer division or modulo by zero");
        if (a == INT64_MIN && b == -1) fail("integer overflow");
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {  // Python floors toward negative infinity
          --q;
          m += b;
        }
        return Value::integer(op == "//" ? q : m);
      }
      if (numbers) {
        const double a = as_double(l), b = as_double(r);
        if (b == 0.0) fail("float division or modulo by zero");
        if (op == "//") return Value::real(std::floor(a / b));
        double m = std::fmod(a, b);
        if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
        return Value::real(m);
      }
      if (op == "%" && l.is_string()) fail("printf-style formatting ('%' on a string) is not supported");
    } else if (op == "**") {
      if (ints && as_int(r) >= 0) {
        int64_t out = 1, base = as_int(l);
        for (int64_t k = 0; k < as_int(r); ++k) {
          if (__builtin_mul_overflow(out, base, &out)) fail("integer overflow");
          if (out == 0 || out == 1) break;
        }
        return Value::integer(out);
      }
      if (numbers) return Value::real(std::pow(as_double(l), as_double(r)));
    }
    fail("unsupported operand type(s) for " + op + ": '" + type_name(l) + "' and '" + type_name(r) + "'");
  }

  static bool contains(const Value& container, const Value& item) {
    switch (container.kind) {
      case Kind::kString:
        if (!item.is_string()) fail("'in <string>' requires a string as left operand, not " + type_name(item));
        return container.s.find(item.s) != std::string::npos;
      case Kind::kList:
        for (const Value& v : *container.list) {
          if (equals(v, item)) return true;
        }
        return false;
      case Kind::kMap:
      case Kind::kNamespace: return item.is_string() && map_find(*container.map, item.s) != nullptr;
      case Kind::kUndefined: return false;
      default: fail("argument of type '" + type_name(container) + "' is not iterable");
    }
  }

  static bool compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return equals(l, r);
    if (op == "!=") return !equals(l, r);
    if (op == "in") return contains(r, l);
    if (op == "notin") return !contains(r, l);
    if (l.is_undefined()) fail_undefined(l);
    if (r.is_undefined()) fail_undefined(r);
    if (op == "<") return less_than(l, r);
    if (op == ">") return less_than(r, l);
    if (op == "<=") return !less_than(r, l);
    return !less_than(l, r);  // ">="
  }

  const Program& program_;
  const ChatTemplateLimits& limits_;
  Budget budget_;
  const std::function<std::tm()>& now_;
  std::vector<Map> scopes_;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  size_t work_ = 0;
  int macro_depth_ = 0;
};

}  // namespace

Result<std::string> render_program(const Program& program, Map globals, const std::function<std::tm()>& now) {
  try {
    Interpreter interpreter(program, std::move(globals), now);
    return interpreter.run();
  } catch (const RenderError& e) {
    std::string where = e.line ? std::to_string(e.line) + ":" + std::to_string(e.column) + ": " : std::string();
    return Status(e.status.code(), "chat template " + where + e.status.message());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "chat template: out of memory while rendering");
  } catch (const std::exception& e) {  // a standard library error: still a Status, never an exception
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

}  // namespace flashscope::chat_template
