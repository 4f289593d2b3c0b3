#include "api/control_query.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpusched::api {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(static_cast<unsigned char>(c));
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Percent-decodes `in` ('+' is a space in the query, as HTML forms send
// it). `what` and `offset` place an error in the target.
absl::StatusOr<std::string> Decode(absl::string_view in, bool plus_is_space,
                                   absl::string_view what, size_t offset) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      const int hi = i + 1 < in.size() ? HexValue(in[i + 1]) : -1;
      const int lo = i + 2 < in.size() ? HexValue(in[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": '%' at byte ", offset + i,
                         " must be followed by two hex digits"));
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(plus_is_space && c == '+' ? ' ' : c);
    }
  }
  for (char c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": control characters are not allowed"));
    }
  }
  return out;
}

// An integer parameter in [lo, hi]; `*v` is kept when it is absent.
template <typename Int>
absl::Status IntParam(const ControlTarget& t, absl::string_view key, Int lo,
                      Int hi, absl::string_view unit, Int* v) {
  const std::string s = t.Get(key);
  if (s.empty()) return absl::OkStatus();
  Int x;
  if (!absl::SimpleAtoi(s, &x) || x < lo || x > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " must be an integer from ", lo, " to ", hi, unit,
                     ", got '", s.substr(0, 64), "'"));
  }
  *v = x;
  return absl::OkStatus();
}

}  // namespace

std::string ControlTarget::Get(absl::string_view key) const {
  for (const auto& [k, v] : query) {
    if (k == key) return v;
  }
  return "";
}

std::vector<std::string> ControlTarget::GetAll(absl::string_view key) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : query) {
    if (k == key) out.push_back(v);
  }
  return out;
}

bool IsControlPath(absl::string_view path) {
  return absl::StartsWith(path, kControlPrefix) &&
         (path.size() == kControlPrefix.size() ||
          path[kControlPrefix.size()] == '/');
}

absl::StatusOr<ControlTarget> ParseControlTarget(absl::string_view target) {
  if (target.size() > kMaxTargetBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request target: ", target.size(), " bytes; at most ",
                     kMaxTargetBytes));
  }
  const size_t q = target.find('?');
  ControlTarget t;
  t.path = std::string(target.substr(0, q));
  if (!IsControlPath(t.path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request target: not under ", kControlPrefix));
  }
  size_t offset = kControlPrefix.size();
  for (absl::string_view seg :
       absl::StrSplit(absl::string_view(t.path).substr(offset), '/')) {
    if (!seg.empty()) {
      if (t.parts.size() == kMaxPathSegments) {
        return absl::InvalidArgumentError(
            absl::StrCat("path: more than ", kMaxPathSegments, " segments"));
      }
      auto part = Decode(seg, false, "path", offset);
      if (!part.ok()) return part.status();
      if (part->find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            "path: a segment may not contain an encoded '/'");
      }
      t.parts.push_back(*std::move(part));
    }
    offset += seg.size() + 1;
  }
  if (q == absl::string_view::npos) return t;
  offset = q + 1;
  for (absl::string_view kv :
       absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
    if (t.query.size() == kMaxQueryParams) {
      return absl::InvalidArgumentError(
          absl::StrCat("query: more than ", kMaxQueryParams, " parameters"));
    }
    const size_t eq = kv.find('=');
    auto key = Decode(kv.substr(0, eq), true, "query", offset);
    if (!key.ok()) return key.status();
    std::string value;
    if (eq != absl::string_view::npos) {
      auto v = Decode(kv.substr(eq + 1), true, "query", offset + eq + 1);
      if (!v.ok()) return v.status();
      value = *std::move(v);
    }
    t.query.emplace_back(*std::move(key), std::move(value));
    offset += kv.size() + 1;
  }
  return t;
}

bool MatchesRoute(absl::string_view pattern,
                  const std::vector<std::string>& parts) {
  size_t i = 0;
  for (absl::string_view want : absl::StrSplit(pattern, '/')) {
    if (i == parts.size() || (want != "{}" && want != parts[i])) return false;
    ++i;
  }
  return i == parts.size();
}

absl::StatusOr<store::EventFilter> ParseEventQuery(const ControlTarget& t) {
  store::EventFilter f;
  f.deployment = t.Get("deployment");
  f.tenant = t.Get("tenant");
  f.kinds = t.GetAll("kind");
  if (f.kinds.size() > kMaxEventKinds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kind: at most ", kMaxEventKinds, " kinds, got ", f.kinds.size()));
  }
  absl::Status st =
      IntParam<Micros>(t, "since", std::numeric_limits<Micros>::min(),
                       std::numeric_limits<Micros>::max(),
                       " (microseconds since the epoch)", &f.since);
  if (!st.ok()) return st;
  st = IntParam<int64_t>(t, "limit", 1, kMaxEventsPerQuery, "", &f.limit);
  if (!st.ok()) return st;
  return f;
}

absl::StatusOr<LogsQuery> ParseLogsQuery(const ControlTarget& t) {
  LogsQuery q;
  q.replica = t.Get("replica");
  const std::string stream = t.Get("stream");
  if (!stream.empty()) {
    if (stream != "stdout" && stream != "stderr") {
      return absl::InvalidArgumentError(absl::StrCat(
          "stream must be stdout or stderr, got '", stream.substr(0, 64), "'"));
    }
    q.stream = stream;
  }
  absl::Status st = IntParam(t, "tail", 1, kMaxLogLines, " lines", &q.tail);
  if (!st.ok()) return st;
  return q;
}

}  // namespace gpusched::api
