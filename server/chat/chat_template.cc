#include "server/chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "server/chat/chat_request.h"
#include "server/chat/content_format.h"
#include "server/chat/jinja_interpreter.h"
#include "server/chat/jinja_parser.h"

namespace kvidx::chat {
namespace {

class JinjaChatTemplate final : public ChatTemplate {
 public:
  JinjaChatTemplate(jinja::StmtPtr root, std::string source, Json specials, RenderLimits limits)
      : root_(std::move(root)), specials_(std::move(specials)), limits_(limits) {
    format_ = DetectContentFormat(*root_);
    // hf.py _detect_developer_role_support.
    names_developer_ = source.find("\"developer\"") != std::string::npos ||
                       source.find("'developer'") != std::string::npos;
  }

  Result<std::string> Render(std::string_view request_json) const override {
    auto input = BuildRenderInput(request_json, format_, names_developer_, specials_);
    if (!input.ok()) return input.status();
    auto shared = std::make_shared<const Json>(std::move(input->context));
    std::map<std::string, jinja::Value> context;
    for (auto it = shared->begin(); it != shared->end(); ++it) context[it.key()] = jinja::Value::Ref(shared, &it.value());
    jinja::Interpreter interpreter(*root_, jinja::Limits{limits_.max_output_bytes, limits_.max_steps});
    std::string rendered;
    try {
      rendered = interpreter.Render(std::move(context));
    } catch (const jinja::RenderError& e) {
      if (e.limit) return Status::OutOfRange(e.message);
      return Status::InvalidArgument(e.message);
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(std::string("template error: ") + e.what());
    } catch (const std::bad_alloc&) {
      return Status::OutOfRange("template rendering ran out of memory");
    }
    if (!input->continue_final_message) return rendered;
    return CutAfterFinalMessage(std::move(rendered), input->final_content);
  }

 private:
  jinja::StmtPtr root_;
  Json specials_;
  RenderLimits limits_;
  ContentFormat format_;
  bool names_developer_;
};

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// tokenizer_config.json's chat_template: a string, or a list of
// {"name", "template"} of which "default" is used.
std::optional<std::string> ConfigTemplate(const Json& config) {
  if (!config.is_object()) return std::nullopt;
  auto t = config.find("chat_template");
  if (t == config.end()) return std::nullopt;
  if (t->is_string()) return t->get<std::string>();
  if (t->is_array()) {
    for (const Json& named : *t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return named["template"].get<std::string>();
      }
    }
  }
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::FromSource(std::string_view template_source,
                                                               std::string_view tokenizer_config_json,
                                                               RenderLimits limits) {
  Json config = Json::object();
  if (!tokenizer_config_json.empty()) {
    config = Json::parse(tokenizer_config_json, nullptr, false);
    if (config.is_discarded()) return Status::InvalidArgument("tokenizer_config.json is not valid JSON");
  }
  auto root = jinja::Parse(template_source);
  if (!root.ok()) return root.status();
  return std::unique_ptr<ChatTemplate>(new JinjaChatTemplate(std::move(root).value(), std::string(template_source),
                                                             SpecialTokens(config), limits));
}

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::LoadDir(const std::string& model_dir,
                                                            const std::string& override_file, RenderLimits limits) {
  std::string config_text;
  if (auto c = ReadFile(model_dir + "/tokenizer_config.json"); c.ok()) config_text = std::move(c).value();
  if (!override_file.empty()) {
    auto src = ReadFile(override_file);
    if (!src.ok()) return src.status();
    return FromSource(src.value(), config_text, limits);
  }
  if (auto src = ReadFile(model_dir + "/chat_template.jinja"); src.ok()) return FromSource(src.value(), config_text, limits);
  Json config = config_text.empty() ? Json() : Json::parse(config_text, nullptr, false);
  if (config.is_discarded()) return Status::InvalidArgument(model_dir + "/tokenizer_config.json is not valid JSON");
  auto t = ConfigTemplate(config);
  if (!t) return Status::NotFound("no chat template in " + model_dir + " (chat_template.jinja or tokenizer_config.json)");
  return FromSource(*t, config_text, limits);
}

}  // namespace kvidx::chat
