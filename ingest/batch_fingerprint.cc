#include "ingest/batch_fingerprint.h"

#include <xxhash.h>

namespace kvidx::ingest {

uint64_t BatchFingerprint(std::string_view payload) { return XXH3_64bits(payload.data(), payload.size()); }

}  // namespace kvidx::ingest
