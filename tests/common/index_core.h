// The block index core a test binary runs on. CMake registers the index
// tests twice: as they are (the default core) and, with
// KVIDX_TEST_INDEX_CORE=runs in their environment, on the run core, so
// both cores answer to one set of tests (docs/RUN_CORE.md, increment 4).
// Tests build their indexes with `BlockIndex index(CoreUnderTest());`.
#pragma once

#include <cstdlib>
#include <string_view>

#include "index/block_index.h"

namespace kvidx::testing {

inline IndexOptions CoreUnderTest() {
  const char* core = std::getenv("KVIDX_TEST_INDEX_CORE");
  IndexOptions options;
  if (core != nullptr && std::string_view(core) == "runs") options.core = IndexCore::kRuns;
  return options;
}

inline bool OnRunCore() { return CoreUnderTest().core == IndexCore::kRuns; }

}  // namespace kvidx::testing
