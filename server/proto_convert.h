// Translation between kvidx.v1 messages and the domain types the node and
// its QueryEngine speak. Nothing here decides anything: validation and
// answers live in QueryEngine; this file only moves fields.
//
// The domain views produced here borrow from the proto message (and the
// caller's scratch), so they live no longer than both.
#pragma once

#include <vector>

#include <grpcpp/grpcpp.h>

#include "base/status.h"
#include "index/block_hasher.h"
#include "index/source_state.h"
#include "kvidx/v1/kvidx.pb.h"
#include "server/prefix_query.h"
#include "server/query_engine.h"
#include "server/route_engine.h"

namespace kvidx::server {

v1::SourceState ToProto(SourceState s);
// Status -> grpc::Status with the matching code, its message clamped.
grpc::Status ToGrpc(const Status& s);
// `s` with its message clamped (base/bounded_text.h says why).
grpc::Status BoundedStatus(const grpc::Status& s);

// `req` as a domain query. `mm` holds the multimodal items `q` points to.
void FromProto(const v1::FindPrefixRequest& req, PrefixQuery* q, std::vector<MultiModalItem>* mm);
// `answer` to `req` as a response (model and request id echoed from `req`).
void ToProto(const v1::FindPrefixRequest& req, const PrefixAnswer& answer, v1::FindPrefixResponse* resp);
void ToProto(const BlockHolder& h, v1::BlockOwner* out);
void ToProto(const ReplicaStatus& r, v1::ReplicaSummary* out);
// The node's part of GetStats (the service adds version, uptime, queries, serving).
void ToProto(const NodeStats& s, v1::GetStatsResponse* out);

// `req` as a domain route query; views into `req` and `mm` as FromProto.
void FromProto(const v1::RouteRequest& req, RouteQuery* q, std::vector<MultiModalItem>* mm);
void ToProto(const v1::RouteRequest& req, const RouteAnswer& answer, v1::RouteResponse* resp);

// `req` as a domain text query (views into `req`).
void FromProto(const v1::TokenizeRequest& req, PrefixQuery* q);

}  // namespace kvidx::server
