// Whole-index comparison of two kvidx Nodes (issue #15 item 8): equal
// FindPrefix answers can hide different refcounts, hits or recency stamps,
// so replicas that must agree are compared owner by owner.
#pragma once

#include <algorithm>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/node.h"

namespace kvidx::server::testing {

inline std::string Describe(const OwnerRecord& o) {
  std::ostringstream s;
  s << "model " << o.model << " block " << o.key.ToString() << " source " << o.source << " tier "
    << static_cast<int>(o.tier) << " group " << o.group << " ref " << o.refcount << " hits " << o.hits << " stamp "
    << o.stamp;
  return s.str();
}

// What a node's index believes, as sorted text lines: every owner (block,
// source, tier, group, refcount, hits, stamp), every source clock, every
// source's GPU copies and blocks per tier. Process-lifetime counters (stored
// blocks, drift, clears) are left out: they restart with the process.
inline std::vector<std::string> IndexState(const Node& node) {
  IndexSnapshot snap;
  node.index().Dump(&snap);
  std::vector<std::string> out;
  for (const OwnerRecord& o : snap.owners) out.push_back(Describe(o));
  for (const auto& [s, clock] : snap.source_clocks) {
    out.push_back("clock of source " + std::to_string(s) + " = " + std::to_string(clock));
  }
  for (SourceId s = 0; s < node.sources().size(); ++s) {
    SourceIndexStats st = node.index().GetSourceStats(s);
    std::ostringstream l;
    l << "source " << s << " gpu_copies " << st.gpu_copies;
    for (const auto& [tier, n] : st.blocks_per_tier) l << " tier" << static_cast<int>(tier) << "=" << n;
    out.push_back(l.str());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Equal IndexState, with the first differences named.
inline void ExpectSameIndexState(const Node& a, const Node& b, const char* when) {
  SCOPED_TRACE(when);
  const std::vector<std::string> sa = IndexState(a);
  const std::vector<std::string> sb = IndexState(b);
  std::vector<std::string> only_a, only_b;
  std::set_difference(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(only_a));
  std::set_difference(sb.begin(), sb.end(), sa.begin(), sa.end(), std::back_inserter(only_b));
  for (size_t i = 0; i < std::min<size_t>(only_a.size(), 5); ++i) ADD_FAILURE() << "only in the first: " << only_a[i];
  for (size_t i = 0; i < std::min<size_t>(only_b.size(), 5); ++i) ADD_FAILURE() << "only in the second: " << only_b[i];
  EXPECT_TRUE(only_a.empty() && only_b.empty())
      << only_a.size() << " lines only in the first, " << only_b.size() << " only in the second (of " << sa.size()
      << " / " << sb.size() << ")";
}

}  // namespace kvidx::server::testing
