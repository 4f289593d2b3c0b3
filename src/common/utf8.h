// UTF-8 validation for text from outside that gpusched keeps as JSON (the
// store, the API): JSON strings must be valid UTF-8, so invalid bytes are
// refused where they come in instead of being replaced on the way out.
#ifndef GPUSCHED_COMMON_UTF8_H_
#define GPUSCHED_COMMON_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace gpusched {

// The offset of the first byte that does not start or continue a valid
// UTF-8 sequence (overlong forms, surrogates and code points above
// U+10FFFF are invalid), or npos when all of `s` is valid.
inline size_t InvalidUtf8At(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xbf;  // the second byte's range
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + n >= s.size()) return i;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return i;
    }
    i += n + 1;
  }
  return absl::string_view::npos;
}

}  // namespace gpusched

#endif  // GPUSCHED_COMMON_UTF8_H_
