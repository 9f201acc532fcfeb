// kvidx query / kvidx block: ask the index what a router would ask — the
// longest cached prefix of a prompt per replica — or who holds one block, so
// an operator can check a routing decision by hand.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "tools/kvidx/cli_common.h"
#include "tools/kvidx/commands.h"
#include "tools/kvidx/json_writer.h"
#include "tools/kvidx/prompt_flags.h"

namespace kvidx::cli {

namespace {

const std::string& QueryUsage() {
  static const std::string usage =
      std::string("usage: kvidx query --model M (--tokens 1,2,... | --tokens-file F | --hashes H1,H2,... |\n"
                  "                   --text S | --text-file F | --messages-file F)\n"
                  "                   [--lora NAME] [--salt S] [--replica R ...] [--tier T ...]\n"
                  "\n"
                  "Prints, per replica and DP rank holding block 0, how many leading blocks of\n"
                  "the prompt it holds on GPU and on GPU or a lower tier.\n"
                  "  --model        model name as configured on the server (required)\n") +
      kPromptFlagsUsage +
      "  --replica      only this replica (repeatable)\n"
      "  --tier         admit only this lower tier, e.g. CPU (repeatable; default all)\n";
  return usage;
}

constexpr char kBlockUsage[] =
    "usage: kvidx block --model M HASH\n"
    "\n"
    "Prints every owner of one block: source, tier, KV-cache group, reference\n"
    "count, engine-confirmed hits and recency (larger = touched more recently).\n"
    "HASH is a decimal uint64 (integer form) or 0x + 32/64 hex digits (digest).\n";

void SeqJson(JsonWriter& w, bool has_seq, uint64_t seq) {
  if (has_seq) {
    w.U64String(seq);
  } else {
    w.Null();
  }
}

}  // namespace

int RunQuery(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("query", QueryUsage().c_str(), leading);
  std::vector<FlagSpec> flags = {{"--model"}, {"--replica"}, {"--tier"}};
  flags.insert(flags.end(), std::begin(kPromptFlags), std::end(kPromptFlags));
  if (std::optional<int> rc = cl.Parse(argc, argv, flags, 0)) return *rc;
  const std::string* model = cl.Get("--model");
  if (model == nullptr || model->empty()) return cl.UsageError("missing --model");
  v1::FindPrefixRequest req;
  req.set_model(*model);
  for (const std::string& r : cl.GetAll("--replica")) req.add_replicas(r);
  for (const std::string& t : cl.GetAll("--tier")) req.add_tiers(t);
  Prompt prompt;
  if (std::optional<int> rc = ReadPrompt(cl, &prompt)) return *rc;
  prompt.MoveInto(&req);

  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  v1::FindPrefixResponse resp;
  if (grpc::Status s = client->FindPrefix(req, &resp); !s.ok()) return cl.RpcError(s);

  if (cl.json()) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(resp.model());
    w.Key("blocks_in_query").Uint(resp.blocks_in_query());
    w.Key("block_size").Uint(resp.block_size());
    w.Key("prompt_tokens").Uint(resp.prompt_tokens());
    w.Key("truncated").Bool(resp.truncated());
    w.Key("applied_batches").Uint(resp.applied_batches());
    w.Key("replicas").BeginArray();
    for (const v1::ReplicaMatch& m : resp.replicas()) {
      w.BeginObject();
      w.Key("replica").String(m.replica());
      w.Key("dp_rank").Uint(m.dp_rank());
      w.Key("source").String(m.source());
      w.Key("matched_blocks").Uint(m.matched_blocks());
      w.Key("matched_blocks_with_lower_tiers").Uint(m.matched_blocks_with_lower_tiers());
      w.Key("matched_tokens").Uint(m.matched_tokens());
      w.Key("matched_tokens_with_lower_tiers").Uint(m.matched_tokens_with_lower_tiers());
      w.Key("hit_blocks").Uint(m.hit_blocks());
      w.Key("hits").Uint(m.hits());
      w.Key("state").String(StateName(m.state()));
      w.Key("last_seq");
      SeqJson(w, m.has_seq(), m.last_seq());
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }

  std::printf("model %s: %llu prompt tokens, %u full blocks in the query (block size %u)%s\n", resp.model().c_str(),
              static_cast<unsigned long long>(resp.prompt_tokens()), resp.blocks_in_query(), resp.block_size(),
              resp.truncated() ? ", truncated to the model's max_query_blocks" : "");
  if (resp.replicas_size() == 0) {
    std::printf("no replica holds block 0\n");
    return kExitOk;
  }
  Table t({"replica", "dp", "gpu_blocks", "with_lower_tiers", "gpu_tokens", "hits", "state", "last_seq"});
  for (const v1::ReplicaMatch& m : resp.replicas()) {
    t.AddRow({m.replica(), std::to_string(m.dp_rank()), std::to_string(m.matched_blocks()),
              std::to_string(m.matched_blocks_with_lower_tiers()), std::to_string(m.matched_tokens()),
              std::to_string(m.hits()), std::string(StateName(m.state())),
              m.has_seq() ? std::to_string(m.last_seq()) : "-"});
  }
  std::fputs(t.Render().c_str(), stdout);
  return kExitOk;
}

int RunBlock(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("block", kBlockUsage, leading);
  constexpr FlagSpec kFlags[] = {{"--model"}};
  if (std::optional<int> rc = cl.Parse(argc, argv, kFlags, 1)) return *rc;
  const std::string* model = cl.Get("--model");
  if (model == nullptr || model->empty()) return cl.UsageError("missing --model");
  if (cl.positional().empty()) return cl.UsageError("missing HASH");
  v1::GetBlockRequest req;
  req.set_model(*model);
  if (std::optional<std::string> err = ParseBlockHash(cl.positional()[0], req.mutable_hash())) {
    return cl.UsageError(*err);
  }

  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  v1::GetBlockResponse resp;
  if (grpc::Status s = client->GetBlock(req, &resp); !s.ok()) return cl.RpcError(s);

  if (cl.json()) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(*model);
    w.Key("hash");
    if (req.hash().u64_size() > 0) {
      w.U64String(req.hash().u64(0));
    } else {
      w.String("0x" + ToHex(req.hash().digest(0)));
    }
    w.Key("owners").BeginArray();
    for (const v1::BlockOwner& o : resp.owners()) {
      w.BeginObject();
      w.Key("source").String(o.source());
      w.Key("replica").String(o.replica());
      w.Key("dp_rank").Uint(o.dp_rank());
      w.Key("tier").String(o.tier());
      w.Key("group").Uint(o.group());
      w.Key("refcount").Uint(o.refcount());
      w.Key("hits").Uint(o.hits());
      w.Key("recency").Uint(o.recency());
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }
  if (resp.owners_size() == 0) {
    std::printf("no owners\n");
    return kExitOk;
  }
  Table t({"source", "tier", "group", "refcount", "hits", "recency"});
  for (const v1::BlockOwner& o : resp.owners()) {
    t.AddRow({o.source(), o.tier(), std::to_string(o.group()), std::to_string(o.refcount()), std::to_string(o.hits()),
              std::to_string(o.recency())});
  }
  std::fputs(t.Render().c_str(), stdout);
  return kExitOk;
}

}  // namespace kvidx::cli
