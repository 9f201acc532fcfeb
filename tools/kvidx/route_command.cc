// kvidx route / kvidx route-done: ask where a request should go, as a router
// would, and see every candidate's cost terms -- or end a route by hand.
#include <cstdio>
#include <optional>
#include <string>

#include "tools/kvidx/cli_common.h"
#include "tools/kvidx/commands.h"
#include "tools/kvidx/json_writer.h"
#include "tools/kvidx/prompt_flags.h"

namespace kvidx::cli {

namespace {

const std::string& RouteUsage() {
  static const std::string usage =
      std::string("usage: kvidx route --model M (--tokens 1,2,... | --tokens-file F | --hashes H1,H2,... |\n"
                  "                   --text S | --text-file F | --messages-file F)\n"
                  "                   [--lora NAME] [--salt S] [--replica R ...] [--prompt-tokens N]\n"
                  "                   [--n N] [--output-tokens N] [--done]\n"
                  "\n"
                  "Prints the rank kvidx would send the request to, its route id and reason,\n"
                  "and every candidate with the terms of its cost (docs/ROUTING.md).\n"
                  "  --model          model name as configured on the server (required)\n") +
      kPromptFlagsUsage +
      "  --replica        a candidate replica (repeatable; default every replica)\n"
      "  --prompt-tokens  the prompt's length for --hashes (default: the hashes' blocks)\n"
      "  --n              siblings sent together (parallel samples, agent branches)\n"
      "  --output-tokens  tokens the request is expected to generate\n"
      "  --done           end the route at once (RouteDone), e.g. for a dry run\n";
  return usage;
}

std::string_view ReasonName(v1::RouteReason r) {
  switch (r) {
    case v1::ROUTE_REASON_AFFINITY: return "affinity";
    case v1::ROUTE_REASON_LOAD: return "load";
    case v1::ROUTE_REASON_WARMUP: return "warmup";
    case v1::ROUTE_REASON_NO_PREFIX: return "no_prefix";
    default: return "unspecified";
  }
}

std::string Fixed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

void PrintJson(const v1::RouteResponse& r) {
  JsonWriter w;
  w.BeginObject();
  w.Key("replica").String(r.replica());
  w.Key("dp_rank").Uint(r.dp_rank());
  w.Key("source").String(r.source());
  w.Key("route_id").U64String(r.route_id());
  w.Key("reason").String(ReasonName(r.reason()));
  w.Key("prompt_tokens").Uint(r.prompt_tokens());
  w.Key("candidates").BeginArray();
  for (const v1::RouteCandidate& c : r.candidates()) {
    w.BeginObject();
    w.Key("source").String(c.source());
    w.Key("gpu_blocks").Uint(c.gpu_blocks());
    w.Key("cpu_blocks").Uint(c.cpu_blocks());
    w.Key("storage_blocks").Uint(c.storage_blocks());
    w.Key("predicted_blocks").Uint(c.predicted_blocks());
    w.Key("cost").Double(c.cost());
    w.Key("cached_tokens").Double(c.cached_tokens());
    w.Key("queued_tokens").Double(c.queued_tokens());
    w.Key("decode_factor").Double(c.decode_factor());
    w.Key("kv_factor").Double(c.kv_factor());
    w.Key("warmup_factor").Double(c.warmup_factor());
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::printf("%s\n", w.str().c_str());
}

void PrintTable(const v1::RouteResponse& r) {
  std::printf("route %s to %s (reason %s), prompt %lu tokens\n", std::to_string(r.route_id()).c_str(),
              r.source().c_str(), std::string(ReasonName(r.reason())).c_str(),
              static_cast<unsigned long>(r.prompt_tokens()));
  Table t({"source", "gpu", "cpu", "storage", "predicted", "cost", "cached", "queued", "decode_x", "kv_x", "warmup_x"});
  for (const v1::RouteCandidate& c : r.candidates()) {
    t.AddRow({c.source(), std::to_string(c.gpu_blocks()), std::to_string(c.cpu_blocks()),
              std::to_string(c.storage_blocks()), std::to_string(c.predicted_blocks()), Fixed(c.cost()),
              Fixed(c.cached_tokens()), Fixed(c.queued_tokens()), Fixed(c.decode_factor()), Fixed(c.kv_factor()),
              Fixed(c.warmup_factor())});
  }
  std::fputs(t.Render().c_str(), stdout);
}

}  // namespace

int RunRoute(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("route", RouteUsage().c_str(), leading);
  std::vector<FlagSpec> flags = {{"--model"}, {"--replica"}, {"--prompt-tokens"}, {"--n"}, {"--output-tokens"},
                                  {"--done", false}};
  flags.insert(flags.end(), std::begin(kPromptFlags), std::end(kPromptFlags));
  if (std::optional<int> rc = cl.Parse(argc, argv, flags, 0)) return *rc;
  const std::string* model = cl.Get("--model");
  if (model == nullptr || model->empty()) return cl.UsageError("missing --model");
  v1::RouteRequest req;
  req.set_model(*model);
  for (const std::string& r : cl.GetAll("--replica")) req.add_replicas(r);
  Prompt prompt;
  if (std::optional<int> rc = ReadPrompt(cl, &prompt)) return *rc;
  prompt.MoveInto(&req);
  uint64_t v = 0;
  if (std::optional<int> rc = cl.GetUint("--prompt-tokens", 0, UINT64_MAX, &v)) return *rc;
  req.set_prompt_tokens(v);
  v = 0;
  if (std::optional<int> rc = cl.GetUint("--n", 0, UINT32_MAX, &v)) return *rc;
  req.set_n(static_cast<uint32_t>(v));
  v = 0;
  if (std::optional<int> rc = cl.GetUint("--output-tokens", 0, UINT32_MAX, &v)) return *rc;
  req.set_expected_output_tokens(static_cast<uint32_t>(v));

  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  v1::RouteResponse resp;
  if (grpc::Status s = client->Route(req, &resp); !s.ok()) return cl.RpcError(s);
  if (cl.Has("--done")) {
    v1::RouteDoneRequest done;
    done.set_route_id(resp.route_id());
    done.set_outcome(v1::ROUTE_OUTCOME_CANCELLED);
    v1::RouteDoneResponse dr;
    if (grpc::Status s = client->RouteDone(done, &dr); !s.ok()) return cl.RpcError(s);
  }
  if (cl.json()) {
    PrintJson(resp);
  } else {
    PrintTable(resp);
  }
  return kExitOk;
}

}  // namespace kvidx::cli
