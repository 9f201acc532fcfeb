// Metric families are declared once: every sample the node renders points at
// a family of AllMetricFamilies() (so --print-metric-families and the deploy
// check see every exported name), and no name is declared twice.
#include "server/metric_families.h"

#include <set>
#include <string>

#include "server/node.h"
#include "server/server_test_util.h"

namespace kvidx::server::testing {
namespace {

TEST(MetricFamilies, NamesAreUniqueAndDocumentedByKindAndHelp) {
  std::set<std::string_view> names;
  for (const MetricFamily* f : AllMetricFamilies()) {
    EXPECT_TRUE(names.insert(f->name).second) << f->name << " declared twice";
    EXPECT_EQ(f->name.rfind("kvidx_", 0), 0u) << f->name;
    EXPECT_FALSE(f->help.empty()) << f->name;
    if (f->kind == MetricKind::kCounter) {
      EXPECT_TRUE(f->name.ends_with("_total")) << f->name;
    }
  }
}

TEST(MetricFamilies, EverySampleANodeRendersBelongsToTheTable) {
  TempDir dir;
  auto rank = MakeRank("a");
  ASSERT_TRUE(rank);
  ServerConfig cfg = TestConfig(dir, /*persistent=*/true);
  cfg.engines = {EngineFor(*rank)};
  Result<std::unique_ptr<Node>> node = Node::Create(cfg);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_TRUE(node.value()->Start().ok());
  ASSERT_TRUE(rank->Serve(Prompt(1, 64), /*full_report=*/false).ok());
  rank->publisher().Flush();
  ASSERT_TRUE(node.value()->Snapshot().ok());

  const std::vector<const MetricFamily*> all = AllMetricFamilies();
  const std::set<const MetricFamily*> table(all.begin(), all.end());
  std::set<std::string_view> rendered;
  for (const MetricSample& s : node.value()->RenderMetrics()) {
    ASSERT_NE(s.family, nullptr);
    EXPECT_TRUE(table.count(s.family)) << s.name() << " is rendered but not in AllMetricFamilies()";
    EXPECT_NE(s.family->kind, MetricKind::kHistogram) << s.name();
    rendered.insert(s.name());
  }
  EXPECT_TRUE(rendered.count("kvidx_batches_total"));
  EXPECT_TRUE(rendered.count("kvidx_snapshots_total"));
}

}  // namespace
}  // namespace kvidx::server::testing
