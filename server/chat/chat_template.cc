#include "server/chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "server/chat/chat_request.h"
#include "server/chat/content_format.h"
#include "server/chat/jinja_interpreter.h"
#include "server/chat/jinja_parser.h"

namespace kvidx::chat {
namespace {

// One parsed template with what vLLM derives from its source.
struct ParsedTemplate {
  jinja::StmtPtr root;
  ContentFormat format;
  bool names_developer;
};

Result<ParsedTemplate> ParseTemplate(std::string_view source) {
  auto root = jinja::Parse(source);
  if (!root.ok()) return root.status();
  ParsedTemplate t;
  t.root = std::move(root).value();
  t.format = DetectContentFormat(*t.root);
  // hf.py _detect_developer_role_support.
  t.names_developer = source.find("\"developer\"") != std::string_view::npos ||
                      source.find("'developer'") != std::string_view::npos;
  return t;
}

bool HasTools(std::string_view request_json) {
  Json req = Json::parse(request_json, nullptr, false);
  return req.is_object() && req.contains("tools") && !req["tools"].is_null();
}

class JinjaChatTemplate final : public ChatTemplate {
 public:
  JinjaChatTemplate(ParsedTemplate main, std::optional<ParsedTemplate> tool_use, Json specials, RenderLimits limits)
      : main_(std::move(main)), tool_use_(std::move(tool_use)), specials_(std::move(specials)), limits_(limits) {}

  Result<RenderedChat> RenderRequest(std::string_view request_json) const override {
    // transformers' get_chat_template: a request with tools uses the
    // "tool_use" template of a named set when there is one.
    const ParsedTemplate& t = (tool_use_ && HasTools(request_json)) ? *tool_use_ : main_;
    auto input = BuildRenderInput(request_json, t.format, t.names_developer, specials_);
    if (!input.ok()) return input.status();
    auto shared = std::make_shared<const Json>(std::move(input->context));
    std::map<std::string, jinja::Value> context;
    for (auto it = shared->begin(); it != shared->end(); ++it) context[it.key()] = jinja::Value::Ref(shared, &it.value());
    jinja::Interpreter interpreter(*t.root, jinja::Limits{limits_.max_output_bytes, limits_.max_steps});
    std::string rendered;
    try {
      rendered = interpreter.Render(std::move(context));
    } catch (const jinja::RenderError& e) {
      if (e.limit) return Status::OutOfRange(e.message);
      // raise_exception('') fails the render as jinja2 does, but a Status
      // without a message tells the caller nothing.
      if (e.message.empty()) return Status::InvalidArgument("the chat template raised an error without a message");
      return Status::InvalidArgument(e.message);
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(std::string("template error: ") + e.what());
    } catch (const std::bad_alloc&) {
      return Status::OutOfRange("template rendering ran out of memory");
    } catch (const std::exception& e) {
      // Number conversions of the standard library (std::out_of_range, ...).
      return Status::InvalidArgument(std::string("template error: ") + e.what());
    }
    RenderedChat out;
    out.add_special_tokens = input->add_special_tokens;
    out.cache_salt = std::move(input->cache_salt);
    if (!input->continue_final_message) {
      out.prompt = std::move(rendered);
      return out;
    }
    Result<std::string> cut = CutAfterFinalMessage(std::move(rendered), input->final_content);
    if (!cut.ok()) return cut.status();
    out.prompt = std::move(cut.value());
    return out;
  }

 private:
  ParsedTemplate main_;
  std::optional<ParsedTemplate> tool_use_;
  Json specials_;
  RenderLimits limits_;
};

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A named template of tokenizer_config.json's list of {"name", "template"}.
std::optional<std::string> NamedTemplate(const Json& list, const std::string& name) {
  for (const Json& named : list) {
    if (named.is_object() && named.value("name", "") == name && named.contains("template") &&
        named["template"].is_string()) {
      return named["template"].get<std::string>();
    }
  }
  return std::nullopt;
}

Result<std::unique_ptr<ChatTemplate>> Build(std::string_view source, std::optional<std::string> tool_use,
                                            const Json& config, RenderLimits limits) {
  auto main = ParseTemplate(source);
  if (!main.ok()) return main.status();
  std::optional<ParsedTemplate> tools;
  if (tool_use) {
    auto t = ParseTemplate(*tool_use);
    if (!t.ok()) return t.status().WithPrefix("tool_use template: ");
    tools = std::move(t).value();
  }
  return std::unique_ptr<ChatTemplate>(
      new JinjaChatTemplate(std::move(main).value(), std::move(tools), SpecialTokens(config), limits));
}

Result<Json> ParseConfig(std::string_view text) {
  if (text.empty()) return Json::object();
  Json config = Json::parse(text, nullptr, false);
  if (config.is_discarded()) return Status::InvalidArgument("tokenizer_config.json is not valid JSON");
  return config;
}

}  // namespace

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::FromSource(std::string_view template_source,
                                                               std::string_view tokenizer_config_json,
                                                               RenderLimits limits) {
  auto config = ParseConfig(tokenizer_config_json);
  if (!config.ok()) return config.status();
  return Build(template_source, std::nullopt, config.value(), limits);
}

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::LoadDir(const std::string& model_dir,
                                                            const std::string& override_file, RenderLimits limits) {
  std::string config_text;
  if (auto c = ReadFile(model_dir + "/tokenizer_config.json"); c.ok()) config_text = std::move(c).value();
  auto config = ParseConfig(config_text);
  if (!config.ok()) return config.status().WithPrefix(model_dir + ": ");
  if (!override_file.empty()) {
    auto src = ReadFile(override_file);
    if (!src.ok()) return src.status();
    return Build(src.value(), std::nullopt, config.value(), limits);
  }
  if (auto src = ReadFile(model_dir + "/chat_template.jinja"); src.ok()) {
    return Build(src.value(), std::nullopt, config.value(), limits);
  }
  const Json& c = config.value();
  auto t = c.is_object() ? c.find("chat_template") : c.end();
  if (t != c.end() && t->is_string()) return Build(t->get<std::string>(), std::nullopt, c, limits);
  if (t != c.end() && t->is_array()) {
    auto main = NamedTemplate(*t, "default");
    auto tool_use = NamedTemplate(*t, "tool_use");
    if (main) return Build(*main, tool_use, c, limits);
    // transformers refuses a named set without "default" unless a request
    // has tools and there is "tool_use"; kvidx wants one for every request.
    if (tool_use) return Status::InvalidArgument(model_dir + ": chat templates have \"tool_use\" but no \"default\"");
  }
  return Status::NotFound("no chat template in " + model_dir + " (chat_template.jinja or tokenizer_config.json)");
}

}  // namespace kvidx::chat
