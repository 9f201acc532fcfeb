// The Client's channel: load balancing over several kvidx replicas (the
// active-active deployment) and reconnecting after a kvidx restart.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "client/client.h"
#include "server/config.h"
#include "server/server.h"

namespace kvidx::client {
namespace {

std::unique_ptr<server::Server> StartReplica(const std::string& listen = "127.0.0.1:0") {
  server::ServerConfig cfg;
  cfg.grpc.listen = listen;
  cfg.metrics.listen = "";
  cfg.data_dir = "";
  server::ModelConfig m;
  m.name = "m";
  cfg.models.push_back(m);
  auto s = server::Server::Create(cfg);
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(s.value()->Start().ok());
  return std::move(s).value();
}

uint64_t Queries(Client& c) {
  v1::GetStatsResponse st;
  EXPECT_TRUE(c.GetStats(&st).ok());
  return st.queries();
}

TEST(ClientLoadBalancing, RoundRobinSpreadsCallsOverEveryReplica) {
  auto a = StartReplica();
  auto b = StartReplica();
  ClientOptions o;
  o.target = "ipv4:127.0.0.1:" + std::to_string(a->grpc_port()) + ",127.0.0.1:" + std::to_string(b->grpc_port());
  o.lb_policy = "round_robin";
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<uint64_t> hashes = {1, 2, 3};
  ClientOptions oa, ob;
  oa.target = "127.0.0.1:" + std::to_string(a->grpc_port());
  ob.target = "127.0.0.1:" + std::to_string(b->grpc_port());
  auto ca = Client::Create(oa);
  auto cb = Client::Create(ob);
  // round_robin sends to the subchannels that are READY; on a loaded
  // machine the second may connect only after a few calls, so calls go on
  // (up to 10 s) until both replicas have served some.
  uint64_t qa = 0, qb = 0, sent = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((qa < 10 || qb < 10) && std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 20; ++i, ++sent) {
      v1::FindPrefixResponse r;
      ASSERT_TRUE(c.value()->FindPrefixHashes("m", hashes, &r).ok());
    }
    qa = Queries(*ca.value());
    qb = Queries(*cb.value());
  }
  EXPECT_EQ(qa + qb, sent);
  EXPECT_GE(qa, 10u);  // round robin: both replicas serve
  EXPECT_GE(qb, 10u);

  // Default policy (pick_first): one replica takes everything.
  ClientOptions pf = o;
  pf.lb_policy = "";
  auto cp = Client::Create(pf);
  for (int i = 0; i < 20; ++i) {
    v1::FindPrefixResponse r;
    ASSERT_TRUE(cp.value()->FindPrefixHashes("m", hashes, &r).ok());
  }
  const uint64_t da = Queries(*ca.value()) - qa, db = Queries(*cb.value()) - qb;
  EXPECT_TRUE((da == 20 && db == 0) || (da == 0 && db == 20)) << da << " / " << db;
}

TEST(ClientReconnect, ABackAgainServerIsReachedWithinTheBackoffMaximum) {
  auto a = StartReplica();
  const int port = a->grpc_port();
  ClientOptions o;
  o.target = "127.0.0.1:" + std::to_string(port);
  o.deadline = std::chrono::milliseconds(200);
  o.reconnect_backoff_initial = std::chrono::milliseconds(50);
  o.reconnect_backoff_max = std::chrono::milliseconds(300);
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok());
  v1::GetStatsResponse st;
  ASSERT_TRUE(c.value()->GetStats(&st).ok());
  ASSERT_TRUE(a->Shutdown(std::chrono::milliseconds(100)).ok());
  a.reset();
  // Down for a while: the channel backs off (up to 300 ms between tries).
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(c.value()->GetStats(&st).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  auto b = StartReplica("127.0.0.1:" + std::to_string(port));
  const auto back = std::chrono::steady_clock::now();
  bool ok = false;
  while (!ok && std::chrono::steady_clock::now() - back < std::chrono::seconds(5)) {
    ok = c.value()->GetStats(&st).ok();
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(ok);
  // gRPC's default backoff would typically take 1-3 s here.
  EXPECT_LT(std::chrono::steady_clock::now() - back, std::chrono::milliseconds(1500));
}

}  // namespace
}  // namespace kvidx::client
