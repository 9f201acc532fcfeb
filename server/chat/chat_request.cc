#include "server/chat/chat_request.h"

#include "server/chat/py_text.h"

namespace kvidx::chat {
namespace {

struct RequestError {
  std::string message;
};

[[noreturn]] void Bad(const std::string& msg) { throw RequestError{msg}; }

bool IsTextPart(const std::string& type) {
  return type == "text" || type == "input_text" || type == "output_text" || type == "refusal" || type == "thinking";
}

// The text parts of `content` (vLLM's _parse_chat_message_content_part);
// a part whose text is null is skipped.
std::vector<std::string> TextParts(const Json& content) {
  std::vector<std::string> texts;
  if (content.is_null()) return texts;
  if (content.is_string()) return {content.get<std::string>()};
  if (!content.is_array()) Bad("message content must be a string or a list of content parts");
  for (const Json& part : content) {
    if (part.is_string()) { texts.push_back(part.get<std::string>()); continue; }
    if (!part.is_object()) Bad("content part must be an object");
    auto t = part.find("type");
    if (t == part.end() || t->is_null()) Bad("Missing 'type' field in multimodal part.");
    if (!t->is_string()) Bad("Invalid 'type' field in multimodal part.");
    std::string type = t->get<std::string>();
    if (!IsTextPart(type)) Bad("unsupported chat content part type: '" + type + "' (kvidx renders text only)");
    const char* key = type == "refusal" ? "refusal" : type == "thinking" ? "thinking" : "text";
    auto v = part.find(key);
    if (v == part.end() || v->is_null()) continue;
    if (!v->is_string()) Bad(std::string("content part '") + key + "' must be a string");
    texts.push_back(v->get<std::string>());
  }
  return texts;
}

std::string JoinLines(const std::vector<std::string>& texts) {
  std::string out;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i) out += '\n';
    out += texts[i];
  }
  return out;
}

Json ParseMessage(const Json& m, ContentFormat format) {
  if (!m.is_object()) Bad("each message must be an object");
  auto r = m.find("role");
  if (r == m.end() || !r->is_string()) Bad("message is missing its 'role'");
  std::string role = r->get<std::string>();
  Json out = Json::object();
  out["role"] = role;
  std::vector<std::string> texts = TextParts(m.value("content", Json()));
  if (format == ContentFormat::kOpenAI) {
    Json parts = Json::array();
    for (const auto& t : texts) parts.push_back({{"type", "text"}, {"text", t}});
    out["content"] = parts;
  } else {
    out["content"] = JoinLines(texts);
  }
  if (role == "assistant") {
    auto tc = m.find("tool_calls");
    if (tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) Bad("assistant tool_calls must be a list");
      out["tool_calls"] = *tc;
    }
    auto reasoning = m.find("reasoning");
    if (reasoning != m.end() && !reasoning->is_null()) {
      out["reasoning"] = *reasoning;
      out["reasoning_content"] = *reasoning;
    }
  } else if (role == "tool") {
    auto id = m.find("tool_call_id");
    if (id != m.end()) out["tool_call_id"] = *id;
    if (out["content"].is_array()) out["content"] = JoinLines(texts);
  }
  auto name = m.find("name");
  if (name != m.end() && name->is_string()) out["name"] = *name;
  auto task = m.find("task");
  if (task != m.end() && task->is_string()) out["task"] = *task;
  if (role == "developer") out["tools"] = m.value("tools", Json());
  return out;
}

void PostprocessToolCalls(Json& message) {
  if (message["role"] != "assistant" || !message.contains("tool_calls")) return;
  Json& calls = message["tool_calls"];
  if (calls.empty()) {
    message.erase("tool_calls");
    return;
  }
  for (Json& item : calls) {
    if (!item.is_object()) Bad("assistant tool_calls entries must be objects.");
    auto fn = item.find("function");
    std::string type = item.contains("type") && item["type"].is_string() ? item["type"].get<std::string>() : "function";
    if (item.contains("type") && !item["type"].is_string()) type = "";
    if (type != "function" || fn == item.end() || !fn->is_object()) {
      Bad("chat completions only support assistant tool_calls of type 'function'.");
    }
    auto args = fn->find("arguments");
    bool truthy = args != fn->end() && !args->is_null() &&
                  !(args->is_string() && args->get_ref<const std::string&>().empty()) &&
                  !((args->is_object() || args->is_array()) && args->empty()) &&
                  !(args->is_boolean() && !args->get<bool>()) && !(args->is_number() && args->get<double>() == 0);
    if (!truthy) {
      (*fn)["arguments"] = Json::object();
      continue;
    }
    if (args->is_object() || args->is_array()) continue;
    if (!args->is_string()) Bad("tool call arguments must be a JSON string");
    Json parsed = Json::parse(args->get<std::string>(), nullptr, false);
    if (parsed.is_discarded()) Bad("tool call arguments are not valid JSON: " + args->get<std::string>());
    (*fn)["arguments"] = parsed.is_null() ? Json::object() : parsed;
  }
}

// hf.py _convert_developer_to_system + _consolidate_system_messages.
Json DevelopersToSystem(const Json& messages) {
  bool any = false;
  for (const Json& m : messages) any |= m["role"] == "developer";
  if (!any) return messages;
  Json converted = Json::array();
  for (Json m : messages) {
    if (m["role"] == "developer") {
      m["role"] = "system";
      m.erase("tools");
    }
    converted.push_back(m);
  }
  std::vector<std::string> system_texts;
  Json rest = Json::array();
  bool needs = false;
  for (size_t i = 0; i < converted.size(); ++i) {
    const Json& m = converted[i];
    if (m["role"] != "system") { rest.push_back(m); continue; }
    if (i > 0 || !system_texts.empty()) needs = true;
    const Json& c = m["content"];
    std::string text;
    if (c.is_array()) {
      std::vector<std::string> parts;
      for (const Json& p : c) {
        if (p.is_object() && p.contains("text")) parts.push_back(p["text"].is_string() ? p["text"].get<std::string>() : py::ToStr(p["text"]));
        else if (p.is_string()) parts.push_back(p.get<std::string>());
      }
      text = JoinLines(parts);
    } else if (c.is_string()) {
      text = c.get<std::string>();
    }
    if (!text.empty()) system_texts.push_back(text);
  }
  if (!needs) return converted;
  std::string merged;
  for (size_t i = 0; i < system_texts.size(); ++i) merged += (i ? "\n\n" : "") + system_texts[i];
  Json out = Json::array();
  out.push_back({{"role", "system"}, {"content", merged}});
  for (const Json& m : rest) out.push_back(m);
  return out;
}

// ChatCompletionToolsParam.model_dump().
Json DumpTool(const Json& tool) {
  if (!tool.is_object()) Bad("each tool must be an object");
  auto fn = tool.find("function");
  if (fn == tool.end() || !fn->is_object()) Bad("tool is missing its 'function'");
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string()) Bad("tool function is missing its 'name'");
  Json f = Json::object();
  f["name"] = *name;
  f["description"] = fn->value("description", Json());
  f["parameters"] = fn->value("parameters", Json());
  if (fn->contains("strict") && !(*fn)["strict"].is_null()) f["strict"] = (*fn)["strict"];
  Json out = Json::object();
  out["type"] = tool.value("type", Json("function"));
  out["function"] = f;
  return out;
}

bool IsUnset(const Json& v) { return v.is_null() || (v.is_string() && v.get<std::string>() == "auto"); }

ChatRenderInput Build(const Json& req, ContentFormat format, bool names_developer, const Json& specials) {
  if (!req.is_object()) Bad("chat request must be a JSON object");
  auto msgs = req.find("messages");
  if (msgs == req.end()) Bad("chat request has no 'messages'");
  if (!msgs->is_array()) Bad("'messages' must be a list");
  Json conversation = Json::array();
  for (const Json& m : *msgs) conversation.push_back(ParseMessage(m, format));
  for (Json& m : conversation) PostprocessToolCalls(m);
  if (!names_developer) conversation = DevelopersToSystem(conversation);

  auto flag = [&](const char* key, bool def) {
    auto it = req.find(key);
    if (it == req.end() || it->is_null()) return def;
    if (!it->is_boolean()) Bad(std::string("'") + key + "' must be a boolean");
    return it->get<bool>();
  };
  const bool add_special_tokens = flag("add_special_tokens", false);
  std::string cache_salt;
  if (auto salt = req.find("cache_salt"); salt != req.end() && !salt->is_null()) {
    if (!salt->is_string() || salt->get_ref<const std::string&>().empty()) {
      Bad("Parameter 'cache_salt' must be a non-empty string if provided.");
    }
    cache_salt = salt->get<std::string>();
  }
  bool add_generation_prompt = flag("add_generation_prompt", true);
  bool continue_final = flag("continue_final_message", false);
  // protocol.py check_generation_prompt looks at the fields as sent;
  // transformers refuses the pair when add_generation_prompt is left at
  // its default.
  if (continue_final && add_generation_prompt) {
    if (req.contains("add_generation_prompt")) {
      Bad("Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
    }
    Bad("continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you "
        "want the model to continue the final message, and add_generation_prompt when you want to add a header "
        "that will prompt it to start a new assistant message instead.");
  }

  Json kwargs = Json::object();
  if (auto k = req.find("chat_template_kwargs"); k != req.end() && !k->is_null()) {
    if (!k->is_object()) Bad("'chat_template_kwargs' must be an object");
    kwargs = *k;
  }
  for (const char* reserved : {"chat_template", "tokenize"}) {
    if (kwargs.contains(reserved)) Bad(std::string("Found unexpected chat template kwargs from request: {'") + reserved + "'}");
  }
  for (const char* taken : {"messages", "conversation", "tools"}) {
    if (kwargs.contains(taken)) Bad(std::string("chat_template_kwargs may not set '") + taken + "'");
  }
  Json reasoning_effort = req.value("reasoning_effort", Json());
  if (!reasoning_effort.is_null() && !kwargs.contains("enable_thinking")) {
    kwargs["enable_thinking"] = !(reasoning_effort.is_string() && reasoning_effort.get<std::string>() == "none");
  }
  if (!IsUnset(reasoning_effort)) kwargs["reasoning_effort"] = reasoning_effort;

  Json tools;
  if (auto t = req.find("tools"); t != req.end() && !t->is_null()) {
    if (!t->is_array()) Bad("'tools' must be a list");
    tools = Json::array();
    for (const Json& tool : *t) tools.push_back(DumpTool(tool));
  }
  Json documents = req.value("documents", Json());

  ChatRenderInput in;
  Json& ctx = in.context;
  ctx = Json::object();
  for (auto it = specials.begin(); it != specials.end(); ++it) ctx[it.key()] = it.value();
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    if (it.key() == "add_generation_prompt" || it.key() == "continue_final_message" || it.key() == "documents") continue;
    ctx[it.key()] = it.value();
  }
  ctx["messages"] = conversation;
  ctx["tools"] = tools;
  ctx["documents"] = documents;
  ctx["add_generation_prompt"] = add_generation_prompt;
  in.continue_final_message = continue_final;
  in.add_special_tokens = add_special_tokens;
  in.cache_salt = std::move(cache_salt);
  if (continue_final) {
    if (conversation.empty()) Bad("continue_final_message needs a final message");
    in.final_content = conversation.back().value("content", Json());
  }
  return in;
}

}  // namespace

Json SpecialTokens(const Json& config) {
  Json out = Json::object();
  if (!config.is_object()) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string()) out[key] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out[key] = (*it)["content"];
  }
  auto extra = config.find("additional_special_tokens");
  if (extra != config.end() && extra->is_array() && !extra->empty()) {
    Json list = Json::array();
    for (const Json& t : *extra) {
      if (t.is_string()) list.push_back(t);
      else if (t.is_object() && t.contains("content")) list.push_back(t["content"]);
    }
    out["additional_special_tokens"] = list;
  }
  return out;
}

namespace {

// The renderer walks values recursively (tojson, repr, equality); a request
// nested deeper than any chat needs is refused instead.
constexpr size_t kMaxJsonDepth = 128;

bool TooDeep(const Json& root) {
  std::vector<std::pair<const Json*, size_t>> stack{{&root, 1}};
  while (!stack.empty()) {
    auto [j, depth] = stack.back();
    stack.pop_back();
    if (!j->is_structured()) continue;
    if (depth > kMaxJsonDepth) return true;
    for (const Json& child : *j) stack.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace

Result<ChatRenderInput> BuildRenderInput(std::string_view request_json, ContentFormat format,
                                         bool template_names_developer, const Json& special_tokens) {
  Json req = Json::parse(request_json, nullptr, false);
  if (req.is_discarded()) return Status::InvalidArgument("chat request is not valid JSON");
  if (TooDeep(req)) {
    return Status::InvalidArgument("chat request nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    ChatRenderInput in = Build(req, format, template_names_developer, special_tokens);
    // Tool-call arguments, parsed from their strings, may nest deeply too.
    if (TooDeep(in.context)) {
      return Status::InvalidArgument("chat request nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    return in;
  } catch (const RequestError& e) {
    return Status::InvalidArgument(e.message);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("chat request: ") + e.what());
  }
}

Result<std::string> CutAfterFinalMessage(std::string rendered, const Json& final_content) {
  std::string final_text;
  if (final_content.is_array()) {
    bool found = false;
    for (auto it = final_content.rbegin(); it != final_content.rend(); ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        final_text = (*it)["text"].get<std::string>();
        found = true;
        break;
      }
    }
    if (!found) return Status::InvalidArgument("continue_final_message is set but we could not find any text to continuein the final message!");
  } else if (final_content.is_string()) {
    final_text = final_content.get<std::string>();
  } else {
    return Status::InvalidArgument("continue_final_message needs the final message's content to be text");
  }
  std::string stripped = py::Strip(final_text, std::nullopt, true, true);
  std::string lstripped = py::Strip(final_text, std::nullopt, true, false);
  size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos) {
    return Status::InvalidArgument(
        "continue_final_message is set but the final message does not appear in the chat after applying the chat "
        "template! This can happen if the chat template deletes portions of the final message. Please verify the "
        "chat template and final message in your chat to ensure they are compatible.");
  }
  // Python compares rendered[loc:loc+len(lstripped)] with the unstripped message.
  if (rendered.substr(loc, lstripped.size()) == final_text) rendered.resize(loc + lstripped.size());
  else rendered.resize(loc + stripped.size());
  return rendered;
}

}  // namespace kvidx::chat
