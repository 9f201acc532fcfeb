// The syntax tree of a parsed Jinja2 template: expressions and statements,
// as jinja2/nodes.py has them for the subset chat templates use. Immutable
// after parsing; shared by every render.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvidx::chat::jinja {

enum class ExprKind : uint8_t {
  kConst,      // literal
  kName,       // name
  kList,       // args: items ([...] and tuples)
  kDict,       // args: key0, value0, key1, value1, ...
  kGetAttr,    // args[0].name
  kGetItem,    // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]] (null parts absent)
  kCall,       // args[0](args[1:], kwargs)
  kFilter,     // args[0] | name(args[1:], kwargs)
  kTest,       // args[0] is name(args[1:], kwargs)
  kNot,        // not args[0]
  kNeg,        // -args[0]
  kPos,        // +args[0]
  kAnd,
  kOr,
  kBinary,     // args[0] name args[1]: + - * / // % ** ~
  kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondExpr,   // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  nlohmann::ordered_json literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtKind : uint8_t {
  kData,       // text
  kOutput,     // {{ expr }}
  kIf,         // expr, body, else_body (elif: a nested kIf in else_body)
  kFor,        // targets in expr [if filter], body, else_body
  kSet,        // targets = expr, or attr target: targets[0].attr = expr
  kSetBlock,   // {% set targets[0] %}body{% endset %} (optional filter)
  kMacro,      // macro text(params) body
  kCallBlock,  // {% call[(params)] expr %}body{% endcall %}
  kFilterBlock,// {% filter filter %}body{% endfilter %}
  kBreak,
  kContinue,
  kScope,      // body in order (generation blocks, template root)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;   // kSet with a namespace attribute target
  std::vector<std::pair<std::string, ExprPtr>> params;   // macro / call block parameters
  std::vector<StmtPtr> body;
  std::vector<StmtPtr> else_body;
};

}  // namespace kvidx::chat::jinja
