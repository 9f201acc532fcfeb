// kvidx-bench chat: median time to render an 8K-token-ish multi-turn chat
// request with each test model's chat template (server/chat).
#pragma once

// Global namespace: bench/main.cc dispatches `kvidx-bench chat ...` to it.
int RunChatBench(int argc, char** argv);
