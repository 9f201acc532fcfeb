// kvidx-bench tokenize: single-thread encode throughput of the native
// tokenizer beside Hugging Face's Rust tokenizers (its Node binding, timed
// by bench/tokenize_reference.js on the same texts in the same run).
#pragma once

int RunTokenizeBench(int argc, char** argv);
