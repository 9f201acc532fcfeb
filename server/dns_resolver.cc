#include "server/dns_resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace kvidx::server {
namespace {

constexpr int kClassIn = 1;   // ns_c_in
constexpr int kTypeSrv = 33;  // ns_t_srv
// How often a blocked lookup looks at `stop`.
constexpr int kMaxPollMs = 100;

DnsOutcome OutcomeOf(int status) {
  switch (status) {
    case ARES_SUCCESS: return DnsOutcome::kOk;
    case ARES_ENOTFOUND: return DnsOutcome::kNxdomain;
    case ARES_ENODATA: return DnsOutcome::kNoData;
    case ARES_ESERVFAIL: return DnsOutcome::kServfail;
    case ARES_EREFUSED:
    case ARES_ENOTIMP: return DnsOutcome::kRefused;
    case ARES_ETIMEOUT: return DnsOutcome::kTimeout;
    case ARES_ECONNREFUSED: return DnsOutcome::kUnreachable;
    case ARES_EBADRESP:
    case ARES_EFORMERR: return DnsOutcome::kMalformed;
    default: return DnsOutcome::kError;
  }
}

template <typename T>
void SetOutcome(DnsAnswer<T>* a, int status) {
  a->outcome = OutcomeOf(status);
  if (status != ARES_SUCCESS) a->detail = ares_strerror(status);
}

// c-ares keeps process-wide state; gRPC initialises it too (it counts).
Status InitLibrary() {
  static std::once_flag once;
  static int status = ARES_SUCCESS;
  std::call_once(once, [] { status = ares_library_init(ARES_LIB_INIT_ALL); });
  if (status != ARES_SUCCESS) return Status::Internal(std::string("c-ares: ") + ares_strerror(status));
  return Status::Ok();
}

void OnAddresses(void* arg, int status, int /*timeouts*/, ares_addrinfo* result) {
  auto* answer = static_cast<DnsAnswer<DnsAddress>*>(arg);
  SetOutcome(answer, status);
  if (result == nullptr) return;
  for (ares_addrinfo_node* n = result->nodes; n != nullptr; n = n->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    DnsAddress a;
    a.ttl_seconds = static_cast<uint32_t>(std::max(n->ai_ttl, 0));
    if (n->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(n->ai_addr)->sin_addr, text, sizeof text);
    } else if (n->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(n->ai_addr)->sin6_addr, text, sizeof text);
      a.v6 = true;
    } else {
      continue;
    }
    a.ip = text;
    answer->records.push_back(std::move(a));
  }
  ares_freeaddrinfo(result);
}

void OnSrv(void* arg, int status, int /*timeouts*/, unsigned char* abuf, int alen) {
  auto* answer = static_cast<DnsAnswer<DnsSrv>*>(arg);
  if (status == ARES_SUCCESS) {
    ares_srv_reply* reply = nullptr;
    status = ares_parse_srv_reply(abuf, alen, &reply);
    for (ares_srv_reply* r = reply; r != nullptr; r = r->next) answer->records.push_back({r->host, r->port});
    if (reply != nullptr) ares_free_data(reply);
  }
  SetOutcome(answer, status);
}

}  // namespace

std::string_view DnsOutcomeName(DnsOutcome o) {
  switch (o) {
    case DnsOutcome::kOk: return "ok";
    case DnsOutcome::kNxdomain: return "nxdomain";
    case DnsOutcome::kNoData: return "nodata";
    case DnsOutcome::kServfail: return "servfail";
    case DnsOutcome::kRefused: return "refused";
    case DnsOutcome::kTimeout: return "timeout";
    case DnsOutcome::kUnreachable: return "unreachable";
    case DnsOutcome::kMalformed: return "malformed";
    case DnsOutcome::kError: break;
  }
  return "error";
}

Result<std::unique_ptr<DnsResolver>> DnsResolver::Create(const Options& options) {
  if (Status s = InitLibrary(); !s.ok()) return s;
  ares_options o{};
  o.timeout = static_cast<int>(options.timeout.count());
  o.tries = options.tries;
  // DNS only: /etc/hosts is not the fleet.
  char lookups[] = "b";
  o.lookups = lookups;
  // Without it c-ares 1.18 answers a SERVFAIL or REFUSED as "could not
  // contact DNS servers", the same as a dead server; the outcome must say
  // which it was. The next server is then asked at the next resolution.
  o.flags = ARES_FLAG_NOCHECKRESP;
  ares_channel channel = nullptr;
  int st = ares_init_options(&channel, &o,
                             ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS);
  if (st != ARES_SUCCESS) return Status::Internal(std::string("c-ares init: ") + ares_strerror(st));
  std::unique_ptr<DnsResolver> r(new DnsResolver(channel));
  if (!options.nameserver.empty()) {
    st = ares_set_servers_ports_csv(channel, options.nameserver.c_str());
    if (st != ARES_SUCCESS) {
      return Status::InvalidArgument("nameserver " + options.nameserver + ": " + ares_strerror(st));
    }
  }
  return r;
}

DnsResolver::~DnsResolver() { ares_destroy(channel_); }

void DnsResolver::Drive(const size_t& pending, const std::atomic<bool>& stop) {
  while (pending > 0) {
    if (stop.load(std::memory_order_relaxed)) {
      ares_cancel(channel_);  // runs the callbacks with ARES_ECANCELLED
      return;
    }
    ares_socket_t socks[ARES_GETSOCK_MAXNUM];
    const int bits = ares_getsock(channel_, socks, ARES_GETSOCK_MAXNUM);
    pollfd fds[ARES_GETSOCK_MAXNUM];
    nfds_t n = 0;
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
      short events = 0;
      if (ARES_GETSOCK_READABLE(bits, i)) events |= POLLIN;
      if (ARES_GETSOCK_WRITABLE(bits, i)) events |= POLLOUT;
      if (events != 0) fds[n++] = pollfd{socks[i], events, 0};
    }
    timeval max{0, kMaxPollMs * 1000};
    timeval tv{};
    const timeval* t = ares_timeout(channel_, &max, &tv);
    const int ms = static_cast<int>(t->tv_sec * 1000 + t->tv_usec / 1000);
    const int ready = poll(fds, n, std::max(ms, 1));
    if (ready <= 0) {
      ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts, retries
      continue;
    }
    for (nfds_t i = 0; i < n; ++i) {
      const bool in = (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0;
      const bool out = (fds[i].revents & POLLOUT) != 0;
      if (in || out) ares_process_fd(channel_, in ? fds[i].fd : ARES_SOCKET_BAD, out ? fds[i].fd : ARES_SOCKET_BAD);
    }
  }
}

std::vector<DnsAnswer<DnsAddress>> DnsResolver::LookupAddresses(const std::vector<std::string>& names,
                                                                const std::atomic<bool>& stop) {
  struct Pending {
    DnsAnswer<DnsAddress> answer;
    size_t* pending;
  };
  std::vector<DnsAnswer<DnsAddress>> answers(names.size());
  size_t pending = names.size();
  std::vector<Pending> slots(names.size());
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = ARES_AI_NOSORT;  // sorting would probe each address with connect()
  for (size_t i = 0; i < names.size(); ++i) {
    slots[i].pending = &pending;
    ares_getaddrinfo(
        channel_, names[i].c_str(), nullptr, &hints,
        [](void* arg, int status, int timeouts, ares_addrinfo* result) {
          auto* slot = static_cast<Pending*>(arg);
          OnAddresses(&slot->answer, status, timeouts, result);
          --*slot->pending;
        },
        &slots[i]);
  }
  Drive(pending, stop);
  for (size_t i = 0; i < names.size(); ++i) answers[i] = std::move(slots[i].answer);
  return answers;
}

DnsAnswer<DnsAddress> DnsResolver::LookupAddresses(const std::string& name, const std::atomic<bool>& stop) {
  return std::move(LookupAddresses(std::vector<std::string>{name}, stop).front());
}

DnsAnswer<DnsSrv> DnsResolver::LookupSrv(const std::string& name, const std::atomic<bool>& stop) {
  struct Pending {
    DnsAnswer<DnsSrv> answer;
    size_t pending = 1;
  } slot;
  ares_search(
      channel_, name.c_str(), kClassIn, kTypeSrv,
      [](void* arg, int status, int timeouts, unsigned char* abuf, int alen) {
        auto* s = static_cast<Pending*>(arg);
        OnSrv(&s->answer, status, timeouts, abuf, alen);
        s->pending = 0;
      },
      &slot);
  Drive(slot.pending, stop);
  return std::move(slot.answer);
}

}  // namespace kvidx::server
