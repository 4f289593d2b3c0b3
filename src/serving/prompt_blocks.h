// Prompt blocks: what the gateway knows of a prompt's KV blocks without the
// model's tokenizer. The prompt's text is cut into blocks of `block_chars`
// bytes and each full block gets a chained hash (the hash of the block and
// of every block before it), like an engine's prefix cache keys its token
// blocks: two prompts share their first k hashes exactly when they share
// their first k * block_chars bytes. The hash is fixed (FNV-1a and
// SplitMix64, no per-process seed), so every gateway of an HA installation
// computes the same hashes and places a prefix on the same replica
// (prefix-affinity's ring). Stateless; thread-safe.
#ifndef GPUSCHED_SERVING_PROMPT_BLOCKS_H_
#define GPUSCHED_SERVING_PROMPT_BLOCKS_H_

#include <cstdint>
#include <string_view>
#include <vector>

namespace gpusched::serving {

// At most this many blocks are hashed (the rest of a longer prompt counts
// for nothing).
inline constexpr int kMaxPromptBlocks = 1024;

// Replaces `out` with the chained hashes of `text`'s full blocks, at most
// kMaxPromptBlocks. `block_chars` >= 1.
void PromptBlockHashes(std::string_view text, int block_chars,
                       std::vector<uint64_t>* out);

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_PROMPT_BLOCKS_H_
