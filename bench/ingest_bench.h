// kvidx-bench ingest: PUB -> ZMQ -> IngestThread (sequencer + decoder) ->
// a counting BatchSink, end to end on one machine.
//
//   kvidx-bench ingest [--batches N] [--blocks B] [--sources S] [--threads T]
//                      [--era map|array-v6|...] [--bytes-hashes]
//                      [--sink count|index]
//                      [--transport tcp|inproc] [--runs R]
//
// Reports, per run and as the median of the runs: batches/s, events/s,
// blocks/s and payload MB/s, measured from the first send to the last batch
// delivered to the sink. The publisher is the bench's main thread (bare XPUB
// sockets, so it starts only once every subscription is live); the sink
// touches every block key (checksum) like an index would, nothing more --
// or, with --sink index, applies every batch to a real BlockIndex through
// IndexSink (the server's apply path).
#pragma once

int RunIngestBench(int argc, char** argv);
