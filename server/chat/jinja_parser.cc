#include "server/chat/jinja_parser.h"

#include <charconv>
#include <set>
#include <stdexcept>

#include "server/chat/jinja_lexer.h"

namespace kvidx::chat::jinja {
namespace {

struct ParseError {
  std::string message;
  int line;
};

// Nesting beyond this is refused: the parser and the evaluator recurse once
// per level, and a template is untrusted input.
constexpr int kMaxNesting = 256;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  StmtPtr Root() {
    auto root = NewStmt(StmtKind::kScope);
    root->body = Statements({});
    if (Cur().kind != TokenKind::kEof) Fail("unexpected '" + Cur().value + "'");
    return root;
  }

 private:
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void Next() { if (pos_ + 1 < toks_.size()) ++pos_; }
  [[noreturn]] void Fail(const std::string& msg) const { throw ParseError{msg, Cur().line}; }

  bool IsOp(const char* op) const { return Cur().kind == TokenKind::kOperator && Cur().value == op; }
  bool IsName(const char* n) const { return Cur().kind == TokenKind::kName && Cur().value == n; }
  bool SkipOp(const char* op) { if (IsOp(op)) { Next(); return true; } return false; }
  bool SkipName(const char* n) { if (IsName(n)) { Next(); return true; } return false; }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) Fail(std::string("expected '") + op + "', got '" + Describe() + "'");
  }
  void ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd) Fail("expected end of statement block, got '" + Describe() + "'");
    Next();
  }
  std::string Describe() const {
    switch (Cur().kind) {
      case TokenKind::kEof: return "end of template";
      case TokenKind::kBlockEnd: return "end of statement block";
      case TokenKind::kVarEnd: return "end of print statement";
      default: return Cur().value;
    }
  }
  std::string ExpectNameToken() {
    if (Cur().kind != TokenKind::kName) Fail("expected name, got '" + Describe() + "'");
    std::string n = Cur().value;
    Next();
    return n;
  }

  StmtPtr NewStmt(StmtKind k) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = Cur().line;
    return s;
  }
  ExprPtr NewExpr(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // Statements up to a block whose first name is in `end_names` (the
  // cursor is left on that name) or the end of the template.
  std::vector<StmtPtr> Statements(const std::set<std::string>& end_names) {
    Nest nest(this);
    std::vector<StmtPtr> out;
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokenKind::kEof) {
        if (!end_names.empty()) {
          std::string names;
          for (const auto& n : end_names) names += (names.empty() ? "'" : " or '") + n + "'";
          Fail("Unexpected end of template. Jinja was looking for the following tags: " + names + ".");
        }
        return out;
      }
      if (t.kind == TokenKind::kData) {
        auto s = NewStmt(StmtKind::kData);
        s->text = t.value;
        Next();
        out.push_back(std::move(s));
      } else if (t.kind == TokenKind::kVarBegin) {
        auto s = NewStmt(StmtKind::kOutput);
        Next();
        s->expr = TupleExpr(true);
        if (Cur().kind != TokenKind::kVarEnd) Fail("expected token 'end of print statement', got '" + Describe() + "'");
        Next();
        out.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        Next();
        if (Cur().kind == TokenKind::kName && end_names.count(Cur().value)) return out;
        out.push_back(Statement());
      } else {
        Fail("unexpected token '" + Describe() + "'");
      }
    }
  }

  StmtPtr Statement() {
    if (Cur().kind != TokenKind::kName) Fail("tag name expected");
    std::string kw = Cur().value;
    if (kw == "if") return If();
    if (kw == "for") return For();
    if (kw == "set") return Set();
    if (kw == "macro") return Macro();
    if (kw == "call") return CallBlock();
    if (kw == "filter") return FilterBlock();
    if (kw == "generation") return Generation();
    if (kw == "break" || kw == "continue") {
      auto s = NewStmt(kw == "break" ? StmtKind::kBreak : StmtKind::kContinue);
      Next();
      ExpectBlockEnd();
      return s;
    }
    Fail("Encountered unknown tag '" + kw + "'.");
  }

  StmtPtr If() {
    auto s = NewStmt(StmtKind::kIf);
    Next();
    s->expr = TupleExpr(/*with_condexpr=*/false);
    ExpectBlockEnd();
    s->body = Statements({"elif", "else", "endif"});
    if (SkipName("elif")) {
      // elif parses as an if nested in else, sharing the endif: the elif
      // token is re-read as `if`.
      --pos_;
      toks_[pos_].value = "if";
      s->else_body.push_back(If());
      return s;
    }
    if (SkipName("else")) {
      ExpectBlockEnd();
      s->else_body = Statements({"endif"});
    }
    Next();  // endif
    ExpectBlockEnd();
    return s;
  }

  std::vector<std::string> AssignTargets(bool* is_attr, std::string* attr) {
    std::vector<std::string> names;
    bool paren = SkipOp("(");
    names.push_back(ExpectNameToken());
    if (is_attr && IsOp(".") ) {
      Next();
      *attr = ExpectNameToken();
      *is_attr = true;
      return names;
    }
    while (SkipOp(",")) {
      if (paren && IsOp(")")) break;
      if (Cur().kind != TokenKind::kName) break;
      names.push_back(ExpectNameToken());
    }
    if (paren) ExpectOp(")");
    if (names.size() > 1 || paren) names.insert(names.begin(), "");  // "" marks a tuple target
    return names;
  }

  StmtPtr For() {
    auto s = NewStmt(StmtKind::kFor);
    Next();
    s->targets = AssignTargets(nullptr, nullptr);
    if (!SkipName("in")) Fail("expected 'in', got '" + Describe() + "'");
    s->expr = TupleExpr(/*with_condexpr=*/false);
    if (SkipName("if")) s->filter = Expression(true);
    if (SkipName("recursive")) Fail("recursive loops are not supported");
    ExpectBlockEnd();
    s->body = Statements({"endfor", "else"});
    if (SkipName("else")) {
      ExpectBlockEnd();
      s->else_body = Statements({"endfor"});
    }
    Next();
    ExpectBlockEnd();
    return s;
  }

  StmtPtr Set() {
    auto s = NewStmt(StmtKind::kSet);
    Next();
    bool is_attr = false;
    s->targets = AssignTargets(&is_attr, &s->attr);
    if (SkipOp("=")) {
      s->expr = TupleExpr(true);
      ExpectBlockEnd();
      return s;
    }
    if (is_attr || s->targets.size() != 1) Fail("expected '='");
    s->kind = StmtKind::kSetBlock;
    if (SkipOp("|")) s->filter = FilterChain(nullptr);
    ExpectBlockEnd();
    s->body = Statements({"endset"});
    Next();
    ExpectBlockEnd();
    return s;
  }

  void Params(std::vector<std::pair<std::string, ExprPtr>>* params) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!params->empty()) ExpectOp(",");
      if (IsOp(")")) break;
      std::string name = ExpectNameToken();
      ExprPtr def;
      if (SkipOp("=")) def = Expression(true);
      params->emplace_back(name, std::move(def));
    }
    Next();
  }

  StmtPtr Macro() {
    auto s = NewStmt(StmtKind::kMacro);
    Next();
    s->text = ExpectNameToken();
    Params(&s->params);
    ExpectBlockEnd();
    s->body = Statements({"endmacro"});
    Next();
    ExpectBlockEnd();
    return s;
  }

  StmtPtr CallBlock() {
    auto s = NewStmt(StmtKind::kCallBlock);
    Next();
    if (IsOp("(")) Params(&s->params);
    s->expr = Expression(true);
    if (s->expr->kind != ExprKind::kCall) Fail("expected call");
    ExpectBlockEnd();
    s->body = Statements({"endcall"});
    Next();
    ExpectBlockEnd();
    return s;
  }

  StmtPtr FilterBlock() {
    auto s = NewStmt(StmtKind::kFilterBlock);
    Next();
    s->filter = FilterChain(nullptr);
    ExpectBlockEnd();
    s->body = Statements({"endfilter"});
    Next();
    ExpectBlockEnd();
    return s;
  }

  StmtPtr Generation() {
    auto s = NewStmt(StmtKind::kScope);
    Next();
    ExpectBlockEnd();
    s->body = Statements({"endgeneration"});
    Next();
    ExpectBlockEnd();
    return s;
  }

  // parse_tuple: an expression, or a tuple if commas follow. A for loop's
  // iterable is parsed without conditional expressions (its `if` filters).
  ExprPtr TupleExpr(bool with_condexpr) {
    int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!SkipOp(",")) break;
        is_tuple = true;
        if (Cur().kind == TokenKind::kBlockEnd || Cur().kind == TokenKind::kVarEnd || IsName("if") || IsOp(")")) break;
      }
      items.push_back(Expression(with_condexpr));
      if (!IsOp(",")) break;
    }
    if (!is_tuple) {
      if (items.empty()) Fail("Expected an expression, got '" + Describe() + "'");
      return std::move(items[0]);
    }
    auto e = NewExpr(ExprKind::kList, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr Expression(bool with_condexpr) {
    Nest nest(this);
    if (!with_condexpr) return Or();
    int line = Cur().line;
    ExprPtr e = Or();
    while (SkipName("if")) {
      auto c = NewExpr(ExprKind::kCondExpr, line);
      ExprPtr cond = Or();
      ExprPtr otherwise;
      if (SkipName("else")) otherwise = Expression(true);
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr Binary(ExprKind k, ExprPtr l, ExprPtr r, const std::string& op, int line) {
    auto e = NewExpr(k, line);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr Or() {
    ExprPtr l = And();
    while (IsName("or")) {
      int line = Cur().line;
      Next();
      l = Binary(ExprKind::kOr, std::move(l), And(), "or", line);
    }
    return l;
  }
  ExprPtr And() {
    ExprPtr l = Not();
    while (IsName("and")) {
      int line = Cur().line;
      Next();
      l = Binary(ExprKind::kAnd, std::move(l), Not(), "and", line);
    }
    return l;
  }
  ExprPtr Not() {
    if (IsName("not")) {
      int line = Cur().line;
      Next();
      auto e = NewExpr(ExprKind::kNot, line);
      e->args.push_back(Not());
      return e;
    }
    return Compare();
  }
  ExprPtr Compare() {
    int line = Cur().line;
    ExprPtr first = Math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().kind == TokenKind::kOperator &&
          (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" || Cur().value == "<=" ||
           Cur().value == ">" || Cur().value == ">=")) {
        op = Cur().value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().value == "in") {
        op = "notin";
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = NewExpr(ExprKind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(Math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr Math1() {
    ExprPtr l = Concat();
    while (IsOp("+") || IsOp("-")) {
      std::string op = Cur().value;
      int line = Cur().line;
      Next();
      l = Binary(ExprKind::kBinary, std::move(l), Concat(), op, line);
    }
    return l;
  }
  ExprPtr Concat() {
    ExprPtr l = Math2();
    while (IsOp("~")) {
      int line = Cur().line;
      Next();
      l = Binary(ExprKind::kBinary, std::move(l), Math2(), "~", line);
    }
    return l;
  }
  ExprPtr Math2() {
    ExprPtr l = Pow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Cur().value;
      int line = Cur().line;
      Next();
      l = Binary(ExprKind::kBinary, std::move(l), Pow(), op, line);
    }
    return l;
  }
  ExprPtr Pow() {
    ExprPtr l = Unary(true);
    while (IsOp("**")) {
      int line = Cur().line;
      Next();
      l = Binary(ExprKind::kBinary, std::move(l), Unary(true), "**", line);
    }
    return l;
  }
  ExprPtr Unary(bool with_filter) {
    Nest nest(this);
    int line = Cur().line;
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      bool neg = IsOp("-");
      Next();
      e = NewExpr(neg ? ExprKind::kNeg : ExprKind::kPos, line);
      e->args.push_back(Unary(false));
    } else {
      e = Primary();
    }
    e = Postfix(std::move(e));
    if (with_filter) e = FilterExpr(std::move(e));
    return e;
  }

  ExprPtr Primary() {
    const Token& t = Cur();
    int line = t.line;
    if (t.kind == TokenKind::kName) {
      auto e = NewExpr(ExprKind::kConst, line);
      const std::string& v = t.value;
      if (v == "true" || v == "True") e->literal = true;
      else if (v == "false" || v == "False") e->literal = false;
      else if (v == "none" || v == "None") e->literal = nullptr;
      else { e->kind = ExprKind::kName; e->name = v; }
      Next();
      return e;
    }
    if (t.kind == TokenKind::kString) {
      std::string s;
      while (Cur().kind == TokenKind::kString) { s += Cur().value; Next(); }
      auto e = NewExpr(ExprKind::kConst, line);
      e->literal = s;
      return e;
    }
    if (t.kind == TokenKind::kInteger) {
      auto e = NewExpr(ExprKind::kConst, line);
      int64_t v = 0;
      auto r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
      if (r.ec != std::errc()) e->literal = std::stod(t.value);
      else e->literal = v;
      Next();
      return e;
    }
    if (t.kind == TokenKind::kFloat) {
      auto e = NewExpr(ExprKind::kConst, line);
      e->literal = std::strtod(t.value.c_str(), nullptr);
      Next();
      return e;
    }
    if (IsOp("(")) {
      Next();
      if (SkipOp(")")) return NewExpr(ExprKind::kList, line);
      ExprPtr e = TupleExpr(true);
      ExpectOp(")");
      return e;
    }
    if (IsOp("[")) {
      Next();
      auto e = NewExpr(ExprKind::kList, line);
      while (!IsOp("]")) {
        if (!e->args.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        e->args.push_back(Expression(true));
      }
      Next();
      return e;
    }
    if (IsOp("{")) {
      Next();
      auto e = NewExpr(ExprKind::kDict, line);
      while (!IsOp("}")) {
        if (!e->args.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        e->args.push_back(Expression(true));
        ExpectOp(":");
        e->args.push_back(Expression(true));
      }
      Next();
      return e;
    }
    Fail("unexpected '" + Describe() + "'");
  }

  ExprPtr Postfix(ExprPtr e) {
    while (true) {
      if (IsOp(".") || IsOp("[")) e = Subscript(std::move(e));
      else if (IsOp("(")) e = Call(std::move(e));
      else return e;
    }
  }

  ExprPtr FilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) { Next(); e = FilterChain(std::move(e)); }
      else if (IsName("is")) e = Test(std::move(e));
      else if (IsOp("(")) e = Call(std::move(e));
      else return e;
    }
  }

  // One filter application (the cursor is after `|`); `value` may be null
  // for filter blocks. Further `|` filters chain on.
  ExprPtr FilterChain(ExprPtr value) {
    int line = Cur().line;
    auto f = NewExpr(ExprKind::kFilter, line);
    f->name = ExpectNameToken();
    while (IsOp(".")) { Next(); f->name += "." + ExpectNameToken(); }
    f->args.push_back(std::move(value));
    if (IsOp("(")) CallArgs(f.get());
    if (!f->args[0]) {
      while (SkipOp("|")) {
        ExprPtr inner = std::move(f);
        auto g = NewExpr(ExprKind::kFilter, Cur().line);
        g->name = ExpectNameToken();
        g->args.push_back(std::move(inner));
        if (IsOp("(")) CallArgs(g.get());
        f = std::move(g);
      }
    }
    return f;
  }

  ExprPtr Test(ExprPtr e) {
    int line = Cur().line;
    Next();  // is
    bool negated = SkipName("not");
    auto t = NewExpr(ExprKind::kTest, line);
    t->name = ExpectNameToken();
    while (IsOp(".")) { Next(); t->name += "." + ExpectNameToken(); }
    t->args.push_back(std::move(e));
    if (IsOp("(")) {
      CallArgs(t.get());
    } else if ((Cur().kind == TokenKind::kName || Cur().kind == TokenKind::kString ||
                Cur().kind == TokenKind::kInteger || Cur().kind == TokenKind::kFloat || IsOp("(") || IsOp("[") ||
                IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) Fail("You cannot chain multiple tests with is");
      t->args.push_back(Postfix(Primary()));
    }
    if (!negated) return t;
    auto n = NewExpr(ExprKind::kNot, line);
    n->args.push_back(std::move(t));
    return n;
  }

  ExprPtr Subscript(ExprPtr e) {
    int line = Cur().line;
    if (SkipOp(".")) {
      if (Cur().kind == TokenKind::kName) {
        auto g = NewExpr(ExprKind::kGetAttr, line);
        g->name = Cur().value;
        Next();
        g->args.push_back(std::move(e));
        return g;
      }
      if (Cur().kind != TokenKind::kInteger) Fail("expected name or number");
      auto g = NewExpr(ExprKind::kGetItem, line);
      g->args.push_back(std::move(e));
      g->args.push_back(Primary());
      return g;
    }
    ExpectOp("[");
    std::vector<ExprPtr> parts;   // one index, or slices
    bool is_slice = false;
    ExprPtr slice[3];
    int idx = 0;
    if (!IsOp(":")) slice[0] = Expression(true);
    while (IsOp(":")) {
      is_slice = true;
      Next();
      if (++idx > 2) Fail("invalid slice");
      if (!IsOp(":") && !IsOp("]")) slice[idx] = Expression(true);
    }
    if (!is_slice && IsOp(",")) {
      // a[x, y] indexes with a tuple.
      auto tup = NewExpr(ExprKind::kList, line);
      tup->args.push_back(std::move(slice[0]));
      while (SkipOp(",")) { if (IsOp("]")) break; tup->args.push_back(Expression(true)); }
      slice[0] = std::move(tup);
    }
    ExpectOp("]");
    if (!is_slice) {
      auto g = NewExpr(ExprKind::kGetItem, line);
      g->args.push_back(std::move(e));
      g->args.push_back(std::move(slice[0]));
      return g;
    }
    auto s = NewExpr(ExprKind::kSlice, line);
    s->args.push_back(std::move(e));
    for (auto& p : slice) s->args.push_back(std::move(p));
    return s;
  }

  void CallArgs(Expr* target) {
    ExpectOp("(");
    bool first = true;
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) Fail("*args and **kwargs are not supported");
      if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator && Peek().value == "=") {
        std::string key = Cur().value;
        Next();
        Next();
        target->kwargs.emplace_back(key, Expression(true));
      } else {
        if (!target->kwargs.empty()) Fail("invalid syntax for function call expression");
        target->args.push_back(Expression(true));
      }
    }
    Next();
  }

  ExprPtr Call(ExprPtr callee) {
    auto c = NewExpr(ExprKind::kCall, Cur().line);
    c->args.push_back(std::move(callee));
    CallArgs(c.get());
    return c;
  }

  // Counts one level of recursion for the lifetime of the guard.
  struct Nest {
    explicit Nest(Parser* p) : p(p) {
      if (++p->depth_ > kMaxNesting) p->Fail("template nested too deeply (more than " + std::to_string(kMaxNesting) + " levels)");
    }
    ~Nest() { --p->depth_; }
    Parser* p;
  };

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<StmtPtr> Parse(std::string_view source) {
  auto tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  try {
    Parser p(std::move(tokens).value());
    return p.Root();
  } catch (const ParseError& e) {
    return Status::InvalidArgument("template syntax error at line " + std::to_string(e.line) + ": " + e.message);
  } catch (const std::exception& e) {
    // A numeric literal beyond double's range (std::stod).
    return Status::InvalidArgument(std::string("template syntax error: ") + e.what());
  }
}

}  // namespace kvidx::chat::jinja
