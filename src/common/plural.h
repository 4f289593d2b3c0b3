// Counts in messages: "1 node", "2 nodes". Header-only, stateless.
#ifndef GPUSCHED_COMMON_PLURAL_H_
#define GPUSCHED_COMMON_PLURAL_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpusched {

// `n` and `noun` ("node"), with an "s" unless n is 1 (regular nouns only).
inline std::string Counted(int64_t n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

}  // namespace gpusched

#endif  // GPUSCHED_COMMON_PLURAL_H_
