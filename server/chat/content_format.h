// vLLM's detection of a template's content format (vllm/renderers/hf.py
// _detect_content_format): "openai" when the template loops over a
// message's content (`for x in message['content']`, through variables
// assigned from `messages` and from loops over them, or over a variable
// named `content`), "string" otherwise. Works on kvidx's syntax tree the
// way vLLM walks jinja2's.
#pragma once

#include "server/chat/chat_request.h"
#include "server/chat/jinja_ast.h"

namespace kvidx::chat {

ContentFormat DetectContentFormat(const jinja::Stmt& root);

}  // namespace kvidx::chat
