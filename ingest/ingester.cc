#include "ingest/ingester.h"

#include <functional>
#include <unordered_map>

#include <spdlog/spdlog.h>

namespace kvidx::ingest {

Ingester::Ingester(const IngestOptions& options, BatchSink* sink) : opts_(options), sink_(sink) {
  if (opts_.num_threads == 0) opts_.num_threads = 1;
}

Ingester::~Ingester() { Stop(); }

Status Ingester::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return Status::FailedPrecondition("ingester already started");
  try {
    if (opts_.context != nullptr) {
      ctx_ = opts_.context;
    } else {
      own_ctx_ = std::make_unique<zmq::context_t>(opts_.io_threads, opts_.max_sockets);
      ctx_ = own_ctx_.get();
    }
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("ingester: zmq context: ") + e.what());
  }
  for (size_t i = 0; i < opts_.num_threads; ++i) {
    threads_.push_back(std::make_unique<IngestThread>(opts_, ctx_, sink_, &registry_, i));
    if (Status s = threads_.back()->Start(); !s.ok()) {
      threads_.clear();
      return s;
    }
  }
  started_ = true;
  return Status::Ok();
}

void Ingester::Stop() {
  std::vector<std::unique_ptr<IngestThread>> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
    started_ = false;
    sources_.clear();
  }
  for (auto& t : threads) t->Stop();
  threads.clear();
  own_ctx_.reset();  // every socket is closed: zmq_ctx_term returns at once
  ctx_ = nullptr;
}

size_t Ingester::ThreadFor(std::string_view source_name) const {
  return std::hash<std::string_view>{}(source_name) % opts_.num_threads;
}

Status Ingester::AddEngine(const EngineConfig& engine, const std::map<uint32_t, ResumePoint>& watermarks) {
  auto expanded = ExpandEngine(engine, opts_.topic_template);
  if (!expanded.ok()) return expanded.status();
  std::vector<SourceSpec>& specs = expanded.value();
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return Status::FailedPrecondition("ingester not started");
    for (const SourceSpec& s : specs) {
      if (sources_.contains(s.name)) return Status::InvalidArgument("source " + s.name + " already exists");
    }
    // Reserve the names before talking to the threads (without the lock).
    for (SourceSpec& s : specs) {
      s.id = next_id_++;
      Entry e{s, ThreadFor(s.name)};
      sources_.emplace(s.name, e);
      entries.push_back(std::move(e));
    }
  }
  Status failed;
  size_t added = 0;
  for (; added < entries.size(); ++added) {
    const Entry& e = entries[added];
    std::optional<uint64_t> wm;
    std::optional<uint64_t> fp;
    if (auto it = watermarks.find(e.spec.dp_rank); it != watermarks.end()) {
      wm = it->second.last_seq;
      fp = it->second.fingerprint;
    }
    failed = threads_[e.thread]->AddSource(e.spec, wm, fp);
    if (!failed.ok()) break;
  }
  if (failed.ok()) return Status::Ok();
  for (size_t i = 0; i < added; ++i) (void)threads_[entries[i].thread]->RemoveSource(entries[i].spec.id);
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries) sources_.erase(e.spec.name);
  return failed;
}

Status Ingester::RemoveEngine(std::string_view replica) {
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = sources_.begin(); it != sources_.end();) {
      if (it->second.spec.replica == replica) {
        entries.push_back(it->second);
        it = sources_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (entries.empty()) return Status::NotFound("no engine '" + std::string(replica) + "'");
  Status first;
  for (const Entry& e : entries) {
    Status s = threads_[e.thread]->RemoveSource(e.spec.id);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status Ingester::Resync(std::string_view source_or_replica) {
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sources_.find(source_or_replica); it != sources_.end()) {
      entries.push_back(it->second);
    } else {
      for (const auto& [name, e] : sources_) {
        if (e.spec.replica == source_or_replica) entries.push_back(e);
      }
    }
  }
  if (entries.empty()) return Status::NotFound("no source or engine '" + std::string(source_or_replica) + "'");
  for (const Entry& e : entries) {
    if (Status s = threads_[e.thread]->Resync(e.spec.id); !s.ok()) return s;
  }
  return Status::Ok();
}

std::vector<SourceStatus> Ingester::ListSources() const {
  std::unordered_map<std::string_view, std::shared_ptr<const SourceStats>> by_name;
  auto stats = registry_.Snapshot();
  for (const auto& s : stats) by_name[s->source] = s;
  std::vector<SourceStatus> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, e] : sources_) {
    SourceStatus st;
    st.spec = e.spec;
    st.thread = e.thread;
    if (auto it = by_name.find(name); it != by_name.end()) {
      st.stats = it->second;
      st.endpoint = st.stats->endpoint;
      st.state = st.stats->current_state();
      st.last_seq = st.stats->last_seq.load(std::memory_order_relaxed);
    }
    out.push_back(std::move(st));
  }
  return out;
}

std::optional<SourceStatus> Ingester::GetSource(std::string_view source_name) const {
  for (SourceStatus& s : ListSources()) {
    if (s.spec.name == source_name) return std::move(s);
  }
  return std::nullopt;
}

uint64_t Ingester::unknown_topic_messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& t : threads_) n += t->unknown_topic_messages();
  return n;
}

}  // namespace kvidx::ingest
