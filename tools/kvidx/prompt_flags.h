// The prompt flags `kvidx query` and `kvidx route` share: --tokens,
// --tokens-file or --hashes, with --lora and --salt for token prompts.
#pragma once

#include <optional>

#include "kvidx/v1/kvidx.pb.h"
#include "tools/kvidx/cli_common.h"

namespace kvidx::cli {

inline constexpr char kPromptFlagsUsage[] =
    "  --tokens       comma-separated token ids (the server hashes them)\n"
    "  --tokens-file  file of token ids separated by commas or whitespace\n"
    "  --hashes       comma-separated block hashes: decimal uint64 (integer form)\n"
    "                 or 0x + 32/64 hex digits (16/32-byte digest form)\n"
    "  --lora         LoRA adapter name (token queries)\n"
    "  --salt         cache_salt (token queries)\n";

// Fills `tokens` or `hashes` (whichever the flags give) from `cl`; on a bad
// command line, the exit code (after printing why).
std::optional<int> ReadPrompt(const CommandLine& cl, v1::TokenPrompt* tokens, v1::BlockHashes* hashes,
                              bool* is_hashes);

}  // namespace kvidx::cli
