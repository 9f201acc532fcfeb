// SourceState: what kvidx knows about one source's stream right now.
//
// Owned and driven by ingest (it sees sequence gaps, replay and peer
// connections); the index stores the current value per source and reports
// it with every query answer, so a router can discount a DEGRADED replica.
// Exactly one state is current. Values are stable: they are exported as
// metrics labels and persisted in snapshots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvidx {

enum class SourceState : uint8_t {
  kConnecting = 0,  // added, no peer connection and no batch yet
  kReplaying = 1,   // a replay request is outstanding; live batches are held
  kExact = 2,       // every batch since a known state has been applied
  kDegraded = 3,    // batches were lost (or undecodable): the index may be wrong for this source
  kDisconnected = 4,// the peer connection dropped (heartbeat timeout or close)
};
inline constexpr size_t kNumSourceStates = 5;

inline std::string_view SourceStateName(SourceState s) {
  switch (s) {
    case SourceState::kConnecting: return "CONNECTING";
    case SourceState::kReplaying: return "REPLAYING";
    case SourceState::kExact: return "EXACT";
    case SourceState::kDegraded: return "DEGRADED";
    case SourceState::kDisconnected: return "DISCONNECTED";
  }
  return "UNKNOWN";
}

}  // namespace kvidx
