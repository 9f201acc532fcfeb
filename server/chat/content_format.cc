#include "server/chat/content_format.h"

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

namespace kvidx::chat {
namespace {

using jinja::Expr;
using jinja::ExprKind;
using jinja::Stmt;
using jinja::StmtKind;

void Collect(const Stmt& s, StmtKind kind, std::vector<const Stmt*>* out) {
  if (s.kind == kind) out->push_back(&s);
  for (const auto& b : s.body) Collect(*b, kind, out);
  for (const auto& b : s.else_body) Collect(*b, kind, out);
}

bool IsVar(const Expr& e, const std::string& name) { return e.kind == ExprKind::kName && e.name == name; }

bool IsAttrAccess(const Expr& e, const std::string& var, const std::string& key) {
  if (e.kind == ExprKind::kGetItem) {
    return IsVar(*e.args[0], var) && e.args[1]->kind == ExprKind::kConst && e.args[1]->literal.is_string() &&
           e.args[1]->literal.get<std::string>() == key;
  }
  return e.kind == ExprKind::kGetAttr && IsVar(*e.args[0], var) && e.name == key;
}

// _is_var_or_elems_access: through filters, tests and slices.
bool IsVarOrElems(const Expr& e, const std::string& var, const std::string* key) {
  if ((e.kind == ExprKind::kFilter || e.kind == ExprKind::kTest) && e.args[0]) return IsVarOrElems(*e.args[0], var, key);
  if (e.kind == ExprKind::kSlice) return IsVarOrElems(*e.args[0], var, key);
  return key ? IsAttrAccess(e, var, *key) : IsVar(e, var);
}

}  // namespace

ContentFormat DetectContentFormat(const Stmt& root) {
  std::vector<const Stmt*> sets, fors;
  Collect(root, StmtKind::kSet, &sets);
  Collect(root, StmtKind::kFor, &fors);
  // Names holding the messages (or slices of them).
  std::vector<std::string> messages_vars{"messages"};
  std::deque<std::string> queue{"messages"};
  while (!queue.empty()) {
    std::string v = queue.front();
    queue.pop_front();
    for (const Stmt* s : sets) {
      if (!s->attr.empty() || s->targets.size() != 1 || !IsVarOrElems(*s->expr, v, nullptr)) continue;
      const std::string& lhs = s->targets[0];
      if (std::find(messages_vars.begin(), messages_vars.end(), lhs) == messages_vars.end()) {
        messages_vars.push_back(lhs);
        queue.push_back(lhs);
      }
    }
  }
  std::vector<std::string> message_vars;
  for (const Stmt* f : fors) {
    if (f->targets.size() != 1) continue;
    for (const auto& v : messages_vars) {
      if (IsVarOrElems(*f->expr, v, nullptr)) { message_vars.push_back(f->targets[0]); break; }
    }
  }
  static const std::string kContent = "content";
  for (const Stmt* f : fors) {
    for (const auto& v : message_vars) {
      if (IsVarOrElems(*f->expr, v, &kContent)) return ContentFormat::kOpenAI;
    }
    if (IsVar(*f->expr, "content")) return ContentFormat::kOpenAI;
  }
  return ContentFormat::kString;
}

}  // namespace kvidx::chat
