// The identity of one engine batch: XXH3-64 of its raw payload bytes.
//
// The payload carries the engine's own timestamp, so equal bytes mean the
// same batch. The sequencer keeps recent fingerprints to tell a duplicate
// from an engine restart, and a snapshot stores the fingerprint of each
// source's last applied batch so a restart can tell "same engine went on"
// from "the engine restarted" (server/snapshot_format.h). The value is part
// of the snapshot format: it must stay XXH3-64 of the payload.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvidx::ingest {

uint64_t BatchFingerprint(std::string_view payload);

}  // namespace kvidx::ingest
