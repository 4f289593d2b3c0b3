#include "config/quantity.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gpusched::config {
namespace {

// "12", "1.5", ".5": a non-negative decimal number.
bool ParseDecimal(absl::string_view s, long double* out) {
  if (s.empty()) return false;
  long double v = 0;
  long double scale = 0;  // 0 until the decimal point
  bool digits = false;
  for (char c : s) {
    if (c == '.' && scale == 0) {
      scale = 1;
    } else if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      digits = true;
      if (scale == 0) {
        v = v * 10 + (c - '0');
      } else {
        scale /= 10;
        v += scale * (c - '0');
      }
    } else {
      return false;
    }
  }
  if (!digits) return false;
  *out = v;
  return true;
}

}  // namespace

std::optional<int64_t> ParseCpuMilli(absl::string_view q) {
  q = absl::StripAsciiWhitespace(q);
  if (absl::ConsumeSuffix(&q, "m")) {
    int64_t milli = 0;
    if (!absl::SimpleAtoi(q, &milli) || milli < 0 || q.empty() ||
        !absl::ascii_isdigit(static_cast<unsigned char>(q[0]))) {
      return std::nullopt;
    }
    return milli;
  }
  long double cores = 0;
  if (!ParseDecimal(q, &cores) || cores > 1e15L) return std::nullopt;
  return static_cast<int64_t>(std::floor(cores * 1000 + 1e-6L));
}

std::optional<int64_t> ParseMemoryMib(absl::string_view q) {
  q = absl::StripAsciiWhitespace(q);
  struct Unit {
    absl::string_view suffix;
    long double bytes;
  };
  static constexpr Unit kUnits[] = {
      {"Ki", 1024.0L},
      {"Mi", 1024.0L * 1024},
      {"Gi", 1024.0L * 1024 * 1024},
      {"Ti", 1024.0L * 1024 * 1024 * 1024},
      {"Pi", 1024.0L * 1024 * 1024 * 1024 * 1024},
      {"k", 1e3L},
      {"M", 1e6L},
      {"G", 1e9L},
      {"T", 1e12L},
      {"P", 1e15L},
  };
  long double factor = 1;
  for (const Unit& u : kUnits) {
    if (absl::ConsumeSuffix(&q, u.suffix)) {
      factor = u.bytes;
      break;
    }
  }
  long double v = 0;
  if (!ParseDecimal(q, &v)) return std::nullopt;
  const long double mib = v * factor / (1024.0L * 1024);
  if (mib > 1e15L) return std::nullopt;
  return static_cast<int64_t>(std::floor(mib + 1e-6L));
}

std::string FormatCpuMilli(int64_t milli) {
  if (milli % 1000 == 0) return absl::StrCat(milli / 1000);
  return absl::StrCat(milli, "m");
}

std::string FormatMemoryMib(int64_t mib) {
  if (mib == 0) return "0";
  if (mib % (1024 * 1024) == 0) return absl::StrCat(mib / (1024 * 1024), "Ti");
  if (mib % 1024 == 0) return absl::StrCat(mib / 1024, "Gi");
  return absl::StrCat(mib, "Mi");
}

}  // namespace gpusched::config
