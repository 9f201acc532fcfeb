// A chat request from OpenAI messages to FindPrefix's answer, in process.
//
// `kvidx-bench chat-prefix [--tokenizer DIR] [--target-tokens N]
// [--queries N] [--loads R] [--unique]` starts a Node whose model has a real Hugging
// Face tokenizer directory (default: Qwen3's from the npm test references)
// and one engine (a FakeEngine over ZMQ on 127.0.0.1) holding the blocks of
// a long shared system prompt, then asks FindPrefix for N multi-turn chats of
// about N tokens sharing that system prompt and differing in the last user
// turn (with --unique: sharing no text at all, only the template's role
// headers and the words any text has): JSON parse, vLLM's message rules, chat-template render, tokenize,
// hash, index walk. Prints p50/p90/p99 microseconds (wall, and the
// thread's CPU time, which a shared host's preemption does not inflate) and, on a PromptEncoder
// loaded afresh R times, the first encode (cold caches) against the repeated
// ones (warm: the repeated system prompt's pre-tokens are cached).
#pragma once

namespace kvidx {
int RunChatPrefixBench(int argc, char** argv);
}  // namespace kvidx
