// kvidx Server over TLS and mutual TLS, with certificates made in the test by
// the openssl CLI: a CA, a server certificate for localhost / 127.0.0.1, a
// client certificate from the same CA, and an unrelated CA with its own
// client certificate (untrusted by the server).
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "common/child_process.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

using kvidx::testing::Slurp;

// The certificates of one test suite (EC prime256v1, valid one day), made in
// a scratch directory and kept in memory: each test writes the files it
// needs into its own directory, so nothing outlives a crashed test run.
class Pki {
 public:
  Pki() {
    TempDir scratch;
    ok_ = Generate(scratch.path());
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  // The PEM text of "<name>.crt" or "<name>.key".
  std::string Pem(const std::string& file) const {
    auto it = pem_.find(file);
    return it == pem_.end() ? "" : it->second;
  }

 private:
  bool Run(const std::string& dir, const std::string& args) {
    const std::string log = dir + "/openssl.log";
    const std::string cmd = "cd '" + dir + "' && openssl " + args + " >>'" + log + "' 2>&1 </dev/null";
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      error_ = "openssl " + args + " failed (" + std::to_string(rc) + "): " + Slurp(log);
      return false;
    }
    return true;
  }
  bool MakeCa(const std::string& dir, const std::string& name, const std::string& cn) {
    return Run(dir, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name +
                        ".key -out " + name + ".crt -days 1 -subj '/CN=" + cn +
                        "' -addext 'basicConstraints=critical,CA:TRUE'" +
                        " -addext 'keyUsage=critical,keyCertSign,cRLSign'");
  }
  bool MakeLeaf(const std::string& dir, const std::string& name, const std::string& cn, const std::string& ca,
                int serial, const std::string& ext) {
    std::ofstream(dir + "/" + name + ".ext") << ext;
    return Run(dir, "req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name +
                        ".key -out " + name + ".csr -subj '/CN=" + cn + "'") &&
           Run(dir, "x509 -req -in " + name + ".csr -CA " + ca + ".crt -CAkey " + ca + ".key -set_serial " +
                        std::to_string(serial) + " -days 1 -out " + name + ".crt -extfile " + name + ".ext");
  }
  bool Generate(const std::string& dir) {
    const std::string leaf = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n";
    const bool ok =
        MakeCa(dir, "ca", "kvidx test CA") &&
        MakeLeaf(dir, "server", "localhost", "ca", 2,
                 leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n") &&
        MakeLeaf(dir, "client", "kvidx-admin", "ca", 3, leaf + "extendedKeyUsage=clientAuth\n") &&
        MakeCa(dir, "evil-ca", "kvidx test CA") &&  // same name, different key
        MakeLeaf(dir, "evil-client", "kvidx-admin", "evil-ca", 3, leaf + "extendedKeyUsage=clientAuth\n");
    if (!ok) return false;
    for (const char* name : {"ca", "server", "client", "evil-ca", "evil-client"}) {
      for (const char* ext : {".crt", ".key"}) {
        const std::string file = std::string(name) + ext;
        pem_[file] = Slurp(dir + "/" + file);
        if (pem_[file].find("-----BEGIN") == std::string::npos) {
          error_ = file + " is not PEM";
          return false;
        }
      }
    }
    return true;
  }

  bool ok_ = false;
  std::string error_;
  std::map<std::string, std::string> pem_;
};

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pki_ = new Pki(); }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(pki_->ok()) << pki_->error(); }

  // A config with TLS on; `client_ca` adds client-certificate checking.
  ServerConfig TlsConfig(bool client_ca = false, bool require_client_cert = true) const {
    ServerConfig c = TestConfig(dir_, false);
    c.grpc.tls.cert_file = dir_.File("server.crt", pki_->Pem("server.crt"));
    c.grpc.tls.key_file = dir_.File("server.key", pki_->Pem("server.key"));
    if (client_ca) {
      c.grpc.tls.client_ca_file = dir_.File("ca.crt", pki_->Pem("ca.crt"));
      c.grpc.tls.require_client_cert = require_client_cert;
    }
    return c;
  }

  void StartServer(ServerConfig cfg) {
    auto s = Server::Create(std::move(cfg));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_GT(server_->grpc_port(), 0);
  }

  // A TLS client trusting `root` ("ca" or "evil-ca"), presenting the
  // certificate `cert` ("" = none), connecting to 127.0.0.1 by the name
  // "localhost" unless `override_name` is false (then the IP SAN is checked).
  Stubs Tls(const std::string& root = "ca", const std::string& cert = "", bool override_name = true) const {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = pki_->Pem(root + ".crt");
    if (!cert.empty()) {
      o.pem_private_key = pki_->Pem(cert + ".key");
      o.pem_cert_chain = pki_->Pem(cert + ".crt");
    }
    grpc::ChannelArguments args;
    if (override_name) args.SetSslTargetNameOverride("localhost");
    return Connect(server_->grpc_port(), grpc::SslCredentials(o), args);
  }

  static grpc::Status Stats(const Stubs& s, v1::GetStatsResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return s.index->GetStats(&ctx, v1::GetStatsRequest(), resp);
  }
  static grpc::Status Query(const Stubs& s) {
    v1::FindPrefixRequest req;
    req.set_model(kModel);
    for (uint64_t h = 1; h <= 3; ++h) req.mutable_hashes()->add_u64(h);
    v1::FindPrefixResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return s.index->FindPrefix(&ctx, req, &resp);
  }
  // ListSources with the token (`token` non-empty) or without any.
  static grpc::Status ListSources(const Stubs& s, const std::string& token, v1::ListSourcesResponse* resp) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return s.admin->ListSources(&ctx, v1::ListSourcesRequest(), resp);
  }
  static std::string Describe(const grpc::Status& s) {
    return std::to_string(static_cast<int>(s.error_code())) + ": " + s.error_message();
  }

  static Pki* pki_;
  TempDir dir_;
  std::unique_ptr<Server> server_;
};

Pki* TlsTest::pki_ = nullptr;

TEST_F(TlsTest, TlsOnlyServesTlsClientsAndAdminNeedsTheToken) {
  auto rank = MakeRank("r0");
  ASSERT_NE(rank, nullptr);
  ServerConfig cfg = TlsConfig();
  cfg.engines.push_back(EngineFor(*rank));
  ASSERT_NO_FATAL_FAILURE(StartServer(cfg));

  Stubs tls = Tls();
  ASSERT_TRUE(WaitFor([&] {
    v1::GetStatsResponse st;
    return Stats(tls, &st).ok() && st.serving();
  })) << "GetStats over TLS never reported serving";

  // A real prompt through a real engine, queried over TLS.
  const std::vector<int64_t> prompt = Prompt(11, 16 * 4);
  ASSERT_TRUE(rank->Serve(prompt, false).ok());
  rank->publisher().Flush();
  const size_t truth = rank->CachedPrefix(KeysOf(prompt));
  ASSERT_EQ(truth, 4u);
  ASSERT_TRUE(WaitFor([&] { return MatchedBlocks(tls.index.get(), prompt, "r0") == truth; }))
      << "FindPrefix over TLS never matched the engine";
  EXPECT_TRUE(Query(tls).ok());

  // The certificate names 127.0.0.1 too: no name override needed.
  grpc::Status by_ip = Query(Tls("ca", "", /*override_name=*/false));
  EXPECT_TRUE(by_ip.ok()) << Describe(by_ip);

  // Plaintext to a TLS port never gets an answer.
  Stubs plain = Connect(server_->grpc_port());
  grpc::Status st = Query(plain);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << Describe(st);
  v1::GetStatsResponse stats;
  EXPECT_EQ(Stats(plain, &stats).error_code(), grpc::StatusCode::UNAVAILABLE);

  // A client that trusts another CA refuses the server's certificate.
  st = Query(Tls("evil-ca"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << Describe(st);

  // Admin: the bearer token works over TLS; nothing else does.
  v1::ListSourcesResponse ls;
  st = ListSources(tls, kToken, &ls);
  ASSERT_TRUE(st.ok()) << Describe(st);
  ASSERT_EQ(ls.sources_size(), 1);
  EXPECT_EQ(ls.sources(0).source(), "r0/dp0");
  st = ListSources(tls, "", &ls);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(st);
  st = ListSources(tls, "not-the-token", &ls);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(st);
  // Without client_ca_file a client certificate is no identity (the server
  // does not even ask for one).
  st = ListSources(Tls("ca", "client"), "", &ls);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(st);
}

TEST_F(TlsTest, MutualTlsRequiredCertIsTheAdminIdentity) {
  ServerConfig cfg = TlsConfig(/*client_ca=*/true, /*require_client_cert=*/true);
  cfg.grpc.admin_token_file = "";  // the certificate alone must do
  ASSERT_NO_FATAL_FAILURE(StartServer(cfg));

  Stubs trusted = Tls("ca", "client");
  ASSERT_TRUE(WaitFor([&] {
    v1::GetStatsResponse st;
    return Stats(trusted, &st).ok() && st.serving();
  }));
  grpc::Status st = Query(trusted);
  EXPECT_TRUE(st.ok()) << Describe(st);
  v1::ListSourcesResponse ls;
  st = ListSources(trusted, "", &ls);
  EXPECT_TRUE(st.ok()) << "admin with a verified client certificate and no token: " << Describe(st);
  EXPECT_EQ(ls.sources_size(), 0);

  // No certificate, or one from a CA the server does not trust: no service
  // at all, not even queries.
  for (const std::string& cert : {std::string(""), std::string("evil-client")}) {
    Stubs s = Tls("ca", cert);
    st = Query(s);
    EXPECT_FALSE(st.ok()) << "query with client cert '" << cert << "'";
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << cert << ": " << Describe(st);
    st = ListSources(s, "", &ls);
    EXPECT_FALSE(st.ok()) << "admin with client cert '" << cert << "'";
    v1::GetStatsResponse stats;
    EXPECT_FALSE(Stats(s, &stats).ok()) << cert;
  }
  // The trusted client still works after the refused ones.
  EXPECT_TRUE(Query(trusted).ok());
}

TEST_F(TlsTest, MutualTlsOptionalCertLetsAnyoneQueryButAdminNeedsCertOrToken) {
  ServerConfig cfg = TlsConfig(/*client_ca=*/true, /*require_client_cert=*/false);
  ASSERT_NO_FATAL_FAILURE(StartServer(cfg));

  Stubs certless = Tls();
  ASSERT_TRUE(WaitFor([&] {
    v1::GetStatsResponse st;
    return Stats(certless, &st).ok() && st.serving();
  }));
  grpc::Status st = Query(certless);
  EXPECT_TRUE(st.ok()) << Describe(st);

  v1::ListSourcesResponse ls;
  st = ListSources(certless, "", &ls);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(st);
  st = ListSources(certless, "wrong", &ls);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(st);
  st = ListSources(certless, kToken, &ls);
  EXPECT_TRUE(st.ok()) << Describe(st);

  // A verified certificate is an identity here too.
  Stubs trusted = Tls("ca", "client");
  st = ListSources(trusted, "", &ls);
  EXPECT_TRUE(st.ok()) << Describe(st);

  // An untrusted certificate never buys admin access (the handshake may
  // fail outright, or the call is refused).
  Stubs evil = Tls("ca", "evil-client");
  st = ListSources(evil, "", &ls);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(st.error_code() == grpc::StatusCode::UNAVAILABLE ||
              st.error_code() == grpc::StatusCode::UNAUTHENTICATED)
      << Describe(st);

  // The plaintext port is still closed to plaintext.
  EXPECT_EQ(Query(Connect(server_->grpc_port())).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, RequireAuthForReadsAdmitsAVerifiedCertificateOrTheToken) {
  ServerConfig cfg = TlsConfig(/*client_ca=*/true, /*require_client_cert=*/false);
  cfg.grpc.require_auth_for_reads = true;
  ASSERT_NO_FATAL_FAILURE(StartServer(cfg));

  Stubs trusted = Tls("ca", "client");
  ASSERT_TRUE(WaitFor([&] {
    v1::GetStatsResponse st;
    return Stats(trusted, &st).ok() && st.serving();
  }));
  grpc::Status st = Query(trusted);
  EXPECT_TRUE(st.ok()) << Describe(st);

  Stubs certless = Tls();
  st = Query(certless);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(st);
  v1::GetStatsResponse stats;
  st = Stats(certless, &stats);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(st);
  // The token admits a certless client too.
  v1::FindPrefixRequest req;
  req.set_model(kModel);
  req.mutable_hashes()->add_u64(1);
  v1::FindPrefixResponse resp;
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
  st = certless.index->FindPrefix(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << Describe(st);
}

TEST_F(TlsTest, UnreadableTlsFilesFailStartNamingTheKey) {
  struct Case {
    const char* key;
    std::function<void(ServerConfig*)> breaks;
  };
  const std::string missing = dir_.path() + "/no-such.pem";
  const Case cases[] = {
      {"grpc.tls.cert_file", [&](ServerConfig* c) { c->grpc.tls.cert_file = missing; }},
      {"grpc.tls.key_file", [&](ServerConfig* c) { c->grpc.tls.key_file = missing; }},
      {"grpc.tls.client_ca_file", [&](ServerConfig* c) { c->grpc.tls.client_ca_file = missing; }},
  };
  for (const Case& c : cases) {
    ServerConfig cfg = TlsConfig(/*client_ca=*/true);
    c.breaks(&cfg);
    auto s = Server::Create(cfg);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Status st = s.value()->Start();
    EXPECT_EQ(st.code(), StatusCode::kNotFound) << c.key << ": " << st.ToString();
    EXPECT_NE(st.message().find(c.key), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find(missing), std::string::npos) << st.ToString();
    EXPECT_EQ(s.value()->grpc_port(), 0);
  }
}

}  // namespace
}  // namespace kvidx::server::testing
