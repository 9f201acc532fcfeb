// DnsResolver: the DNS lookups of discovery, through c-ares.
//
// c-ares is the resolver gRPC already links; it builds the queries, retries,
// falls back to TCP when an answer is truncated (a headless Service of
// thousands of pods), and parses every answer: kvidx parses no DNS bytes.
// Each failure is one named outcome (DnsOutcomeName), the `result` label of
// kvidx_discovery_resolutions_total.
//
// Lookups block the calling thread (the discovery thread) for at most about
// timeout x tries, and end early once `stop` is set. One resolver per
// provider: its nameserver and timeout are the provider's.
//
// Thread-compatible: one thread uses a resolver at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

struct ares_channeldata;

namespace kvidx::server {

enum class DnsOutcome : uint8_t {
  kOk,
  kNxdomain,     // the name does not exist
  kNoData,       // it exists, with no record of the asked type
  kServfail,     // the server failed (SERVFAIL)
  kRefused,      // the server refused (REFUSED, NOTIMP)
  kTimeout,      // no answer in time
  kUnreachable,  // the server could not be reached (connection refused)
  kMalformed,    // an answer c-ares could not parse
  kError,        // anything else (out of memory, stopped, ...)
};
inline constexpr size_t kNumDnsOutcomes = 9;
std::string_view DnsOutcomeName(DnsOutcome o);

struct DnsAddress {
  std::string ip;  // text form, IPv6 without brackets
  bool v6 = false;
  uint32_t ttl_seconds = 0;
};

struct DnsSrv {
  std::string target;  // as in the record (a trailing dot possible)
  uint16_t port = 0;
};

template <typename T>
struct DnsAnswer {
  DnsOutcome outcome = DnsOutcome::kError;
  std::string detail;  // c-ares' text for a failure
  std::vector<T> records;
};

class DnsResolver {
 public:
  struct Options {
    std::string nameserver;  // "IP:PORT" or "[IPv6]:PORT"; "" = the system's
    std::chrono::milliseconds timeout{5000};
    int tries = 2;
  };
  // InvalidArgument for a nameserver c-ares does not take; Internal if
  // c-ares cannot start.
  static Result<std::unique_ptr<DnsResolver>> Create(const Options& options);
  ~DnsResolver();
  DnsResolver(const DnsResolver&) = delete;
  DnsResolver& operator=(const DnsResolver&) = delete;

  // A and AAAA records of `name`.
  DnsAnswer<DnsAddress> LookupAddresses(const std::string& name, const std::atomic<bool>& stop);
  // The same for many names at once (SRV targets), answers in their order.
  std::vector<DnsAnswer<DnsAddress>> LookupAddresses(const std::vector<std::string>& names,
                                                     const std::atomic<bool>& stop);
  // SRV records of `name`.
  DnsAnswer<DnsSrv> LookupSrv(const std::string& name, const std::atomic<bool>& stop);

 private:
  explicit DnsResolver(ares_channeldata* channel) : channel_(channel) {}
  // Runs c-ares until `pending` reaches 0 or `stop` is set (then cancels).
  void Drive(const size_t& pending, const std::atomic<bool>& stop);

  ares_channeldata* channel_;
};

}  // namespace kvidx::server
