#include "serving/prompt_blocks.h"

#include <algorithm>

#include "common/random.h"
#include "serving/split.h"

namespace gpusched::serving {

void PromptBlockHashes(std::string_view text, int block_chars,
                       std::vector<uint64_t>* out) {
  out->clear();
  const size_t size = static_cast<size_t>(std::max(1, block_chars));
  const size_t n = std::min<size_t>(text.size() / size, kMaxPromptBlocks);
  out->reserve(n);
  uint64_t chain = 0;
  for (size_t b = 0; b < n; ++b) {
    chain = Mix64(chain ^ StickyHash(text.substr(b * size, size)));
    out->push_back(chain);
  }
}

}  // namespace gpusched::serving
