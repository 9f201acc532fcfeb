// The Jinja2 parser: tokens from jinja_lexer to a syntax tree, following
// jinja2/parser.py's grammar and precedence (conditional, or, and, not,
// comparisons and in, + -, ~, * / // %, **, unary, filters and tests,
// postfix access and calls), with the statements chat templates use: if,
// for (with filter and else), set (plain, tuple, namespace attribute,
// block), macro, call, filter, break/continue (loopcontrols), raw, and
// transformers' generation block.
#pragma once

#include <memory>
#include <string_view>

#include "base/status.h"
#include "server/chat/jinja_ast.h"

namespace kvidx::chat::jinja {

// The template's root (a kScope statement); InvalidArgument with the line
// and jinja's wording for a syntax error.
Result<StmtPtr> Parse(std::string_view source);

}  // namespace kvidx::chat::jinja
