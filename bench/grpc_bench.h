// kvidx-bench grpc: FindPrefix over real gRPC on loopback, against a kvidx
// server fed by real ZMQ publishers, while ingest runs.
//
//   kvidx-bench grpc [--replicas 64] [--prompt-tokens 8192] [--prompts 64]
//                    [--clients 2] [--seconds 5] [--runs 3]
//                    [--mode tokens|hashes|stream|all] [--no-churn]
//                    [--holders 8] [--shared-blocks 32] [--churn-rate 5000]
//                    [--server-bin PATH]...
//
// Without --server-bin the server runs in this process. With it, each
// given kvidx-server binary runs in its own process (a config written for
// the session's engines), the binaries taking turns run by run, each with
// a fresh fleet; the server's CPU per query is then read from /proc apart
// from this process's (clients and publishers). Two binaries = an A/B of
// the served path in one run.
//
// Setup: one FakeEngine (PUB + replay ROUTER) per replica. `prompts` 8K-token
// prompts (vLLM sha256 block hashes, 16-token blocks) share a system prompt
// of `shared-blocks` blocks that every replica holds; beyond it each prompt
// is held to a random depth by `holders` random replicas (what prefix-aware
// routing produces), or with --holders 0 by 3/4 of all replicas (worst
// case: ~48 candidate sources walked over 512 blocks). Published as
// BlockStored batches.
// During measurement a churn thread publishes store+remove batches (16+16
// blocks) to random replicas at --churn-rate batches/s (0 = as fast as
// ingest takes them; --no-churn turns it off). For scale: a vLLM engine
// publishes at most one batch per scheduler step, so 64 busy replicas send
// a few thousand batches/s.
// Clients are threads with one channel each, issuing one call at a time
// (closed loop); latency is measured per call at the client.
//
// Reports per mode and run: queries/s, p50/p90/p99 latency, ingest
// batches/s during the run; then the median over runs.
#pragma once

int RunGrpcBench(int argc, char** argv);
