#include "sim/serve_trace.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/check.h"
#include "common/csv.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "sim/serve_trace_internal.h"

namespace gpusched::sim {
namespace trace_internal {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"),
                                          &std::fclose);
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  }
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) {
    text.append(buf, n);
  }
  if (std::ferror(f.get())) {
    return absl::DataLossError(absl::StrCat(path, ": read error"));
  }
  return text;
}

absl::Status LineError(absl::string_view path, int line,
                       absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", what));
}

bool ParseInt(absl::string_view s, int64_t* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}
bool ParseFinite(absl::string_view s, double* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty() &&
         std::isfinite(*v);
}

void SortByArrival(Trace& t) {
  auto by_arrival = [](const TraceRequest& a, const TraceRequest& b) {
    return a.arrival < b.arrival;
  };
  if (!std::is_sorted(t.requests.begin(), t.requests.end(), by_arrival)) {
    std::stable_sort(t.requests.begin(), t.requests.end(), by_arrival);
  }
}

}  // namespace trace_internal

namespace {

using trace_internal::kInt32Max;
using trace_internal::LineError;
using trace_internal::ParseFinite;
using trace_internal::ParseInt;
using trace_internal::ReadFileToString;
using trace_internal::SortByArrival;

// Arrivals past this many microseconds (about 292,000 years) are clamped.
constexpr double kMaxMicros = 9.0e18;

bool ParseUint(absl::string_view s, uint64_t* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

// Reads a token-count column as a non-negative int32.
absl::StatusOr<int32_t> GetTokens(const CsvRow& row, absl::string_view path,
                                  absl::string_view column) {
  ASSIGN_OR_RETURN(int64_t v, row.GetInt(column));
  if (v < 0 || v > kInt32Max) {
    return LineError(
        path, row.line(),
        absl::StrCat("column '", column, "': token count must be in [0, ",
                     kInt32Max, "], got ", v));
  }
  return static_cast<int32_t>(v);
}

// ---- Azure ----------------------------------------------------------------

bool Digits(absl::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// "YYYY-MM-DD HH:MM:SS[.f{1,9}]" (or 'T' between date and time) as
// nanoseconds since 1970-01-01 00:00:00, read as UTC: plain calendar
// arithmetic, no locale and no time zone.
bool ParseAzureTimestamp(absl::string_view s, int64_t* ns) {
  s = absl::StripAsciiWhitespace(s);
  int y, mo, d, h, mi, sec;
  if (!Digits(s, 0, 4, &y) || s.size() < 19 || s[4] != '-' ||
      !Digits(s, 5, 2, &mo) || s[7] != '-' || !Digits(s, 8, 2, &d) ||
      (s[10] != ' ' && s[10] != 'T') || !Digits(s, 11, 2, &h) || s[13] != ':' ||
      !Digits(s, 14, 2, &mi) || s[16] != ':' || !Digits(s, 17, 2, &sec)) {
    return false;
  }
  int64_t frac_ns = 0;
  if (s.size() > 19) {
    const size_t digits = s.size() - 20;
    if (s[19] != '.' || digits < 1 || digits > 9) return false;
    int frac = 0;
    if (!Digits(s, 20, digits, &frac)) return false;
    frac_ns = frac;
    for (size_t i = digits; i < 9; ++i) frac_ns *= 10;
  }
  using namespace std::chrono;
  const year_month_day ymd{year{y}, month{static_cast<unsigned>(mo)},
                           day{static_cast<unsigned>(d)}};
  if (!ymd.ok() || h > 23 || mi > 59 || sec > 60) return false;
  const int64_t days = sys_days{ymd}.time_since_epoch().count();
  const int64_t secs = ((days * 24 + h) * 60 + mi) * 60 + sec;
  // 1970 to about 2255: nanoseconds and their differences fit an int64
  // (found by fuzz_trace_csv: year 1450 overflowed).
  if (secs < 0 || secs > 9'000'000'000) return false;
  *ns = secs * 1'000'000'000 + frac_ns;
  return true;
}

// ---- Mooncake -------------------------------------------------------------

// A light scanner for one JSON object per line. Strings are returned raw
// (escapes kept): the field names we look for contain none.
class JsonLineScanner {
 public:
  explicit JsonLineScanner(absl::string_view s) : s_(s) {}

  size_t column() const { return pos_ + 1; }
  // The column where the next token starts.
  size_t NextColumn() {
    SkipSpace();
    return pos_ + 1;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == s_.size();
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool String(absl::string_view* raw) {
    if (!Consume('"')) return false;
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      pos_ += s_[pos_] == '\\' ? 2 : 1;
    }
    if (pos_ >= s_.size()) {
      pos_ = s_.size();  // a trailing backslash may step past the end
      return false;
    }
    *raw = s_.substr(start, pos_ - start);
    ++pos_;
    return true;
  }
  // The characters of a JSON number (validated by the caller's conversion).
  bool NumberToken(absl::string_view* tok) {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < s_.size() && IsNumberChar(s_[pos_])) ++pos_;
    *tok = s_.substr(start, pos_ - start);
    return pos_ > start;
  }
  bool SkipValue(int depth = 0) {
    if (depth > 64) return false;
    SkipSpace();
    if (pos_ >= s_.size()) return false;
    absl::string_view tok;
    switch (s_[pos_]) {
      case '"':
        return String(&tok);
      case '{':
        ++pos_;
        if (Consume('}')) return true;
        do {
          if (!String(&tok) || !Consume(':') || !SkipValue(depth + 1)) {
            return false;
          }
        } while (Consume(','));
        return Consume('}');
      case '[':
        ++pos_;
        if (Consume(']')) return true;
        do {
          if (!SkipValue(depth + 1)) return false;
        } while (Consume(','));
        return Consume(']');
      default:
        for (absl::string_view lit : {"true", "false", "null"}) {
          if (absl::StartsWith(s_.substr(pos_), lit)) {
            pos_ += lit.size();
            return true;
          }
        }
        return NumberToken(&tok);
    }
  }

 private:
  static bool IsNumberChar(char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' ||
           c == 'e' || c == 'E';
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' ||
                                s_[pos_] == '\r' || s_[pos_] == '\n')) {
      ++pos_;
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

absl::Status ParseMooncakeLine(absl::string_view path, int line_no,
                               absl::string_view line, TraceRequest* r) {
  JsonLineScanner in(line);
  size_t col = 0;  // where the value being read starts
  auto fail = [&](absl::string_view what, size_t at = 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", line_no, ":", at > 0 ? at : in.column(), ": ", what));
  };
  auto tokens = [&](absl::string_view field, absl::string_view tok,
                    int32_t* out) {
    int64_t v = 0;
    if (!ParseInt(tok, &v) || v < 0 || v > kInt32Max) {
      return fail(absl::StrCat(field, " must be an integer in [0, ", kInt32Max,
                               "], got '", tok, "'"),
                  col);
    }
    *out = static_cast<int32_t>(v);
    return absl::OkStatus();
  };
  if (!in.Consume('{')) return fail("expected a JSON object");
  bool have_ts = false, have_in = false, have_out = false, have_hash = false;
  if (!in.Consume('}')) {
    do {
      absl::string_view key, tok;
      if (!in.String(&key)) return fail("expected a field name");
      if (!in.Consume(':')) {
        return fail(absl::StrCat("expected ':' after \"", key, "\""));
      }
      col = in.NextColumn();
      if (key == "timestamp") {
        if (!in.NumberToken(&tok))
          return fail("timestamp must be a number", col);
        int64_t ms = 0;
        double ms_d = 0;
        if (ParseInt(tok, &ms) && ms >= 0 && ms < kMaxMicros / 1000) {
          r->arrival = ms * kMicrosPerMilli;
        } else if (ParseFinite(tok, &ms_d) && ms_d >= 0 &&
                   ms_d < kMaxMicros / 1000) {
          r->arrival = std::llround(ms_d * kMicrosPerMilli);
        } else {
          return fail(
              absl::StrCat(
                  "timestamp must be a non-negative number of ms, got '", tok,
                  "'"),
              col);
        }
        have_ts = true;
      } else if (key == "input_length") {
        if (!in.NumberToken(&tok))
          return fail("input_length must be a number", col);
        RETURN_IF_ERROR(tokens(key, tok, &r->input_tokens));
        have_in = true;
      } else if (key == "output_length") {
        if (!in.NumberToken(&tok)) {
          return fail("output_length must be a number", col);
        }
        RETURN_IF_ERROR(tokens(key, tok, &r->output_tokens));
        have_out = true;
      } else if (key == "hash_ids") {
        if (!in.Consume('[')) return fail("hash_ids must be an array", col);
        r->prefix_blocks.clear();
        if (!in.Consume(']')) {
          do {
            uint64_t h = 0;
            const size_t at = in.NextColumn();
            if (!in.NumberToken(&tok) || !ParseUint(tok, &h)) {
              return fail(absl::StrCat("hash_ids[", r->prefix_blocks.size(),
                                       "] must be a non-negative integer"),
                          at);
            }
            r->prefix_blocks.push_back(h);
          } while (in.Consume(','));
          if (!in.Consume(']')) return fail("expected ',' or ']' in hash_ids");
        }
        have_hash = true;
      } else if (!in.SkipValue()) {
        return fail(absl::StrCat("malformed value of \"", key, "\""), col);
      }
    } while (in.Consume(','));
    if (!in.Consume('}')) return fail("expected ',' or '}'");
  }
  if (!in.AtEnd()) return fail("unexpected text after the object");
  for (const auto& [have, field] :
       {std::pair{have_ts, "timestamp"}, std::pair{have_in, "input_length"},
        std::pair{have_out, "output_length"},
        std::pair{have_hash, "hash_ids"}}) {
    if (!have) {
      return LineError(path, line_no,
                       absl::StrCat("missing field \"", field, "\""));
    }
  }
  const int64_t blocks = (int64_t{r->input_tokens} + kMooncakeBlockTokens - 1) /
                         kMooncakeBlockTokens;
  if (static_cast<int64_t>(r->prefix_blocks.size()) != blocks) {
    return LineError(path, line_no,
                     absl::StrCat("hash_ids has ", r->prefix_blocks.size(),
                                  " entries but input_length ", r->input_tokens,
                                  " needs ", blocks, " (one per ",
                                  kMooncakeBlockTokens, "-token block)"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- Readers
// -------------------------------------------------------------------

absl::StatusOr<Trace> ReadAzureTrace(const std::string& path) {
  ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  RETURN_IF_ERROR(
      table.RequireColumns({"TIMESTAMP", "ContextTokens", "GeneratedTokens"}));
  Trace trace;
  trace.source = path;
  trace.format = "azure";
  std::vector<int64_t> ns(table.rows().size());
  trace.requests.resize(table.rows().size());
  int64_t first = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < table.rows().size(); ++i) {
    const CsvRow& row = table.rows()[i];
    ASSIGN_OR_RETURN(absl::string_view ts, row.Get("TIMESTAMP"));
    if (!ParseAzureTimestamp(ts, &ns[i])) {
      return LineError(path, row.line(),
                       absl::StrCat("column 'TIMESTAMP': expected "
                                    "'YYYY-MM-DD HH:MM:SS.fffffff', got '",
                                    ts, "'"));
    }
    first = std::min(first, ns[i]);
    TraceRequest& r = trace.requests[i];
    ASSIGN_OR_RETURN(r.input_tokens, GetTokens(row, path, "ContextTokens"));
    ASSIGN_OR_RETURN(r.output_tokens, GetTokens(row, path, "GeneratedTokens"));
  }
  for (size_t i = 0; i < ns.size(); ++i) {
    // Non-negative, so adding half a microsecond rounds to nearest.
    trace.requests[i].arrival = (ns[i] - first + 500) / 1000;
  }
  SortByArrival(trace);
  return trace;
}

absl::StatusOr<Trace> ReadMooncakeTrace(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  Trace trace;
  trace.source = path;
  trace.format = "mooncake";
  trace.block_tokens = kMooncakeBlockTokens;
  trace.requests.reserve(std::count(text.begin(), text.end(), '\n') + 1);
  RETURN_IF_ERROR(ForEachLine(text, [&](int line_no, absl::string_view line) {
    TraceRequest r;
    RETURN_IF_ERROR(ParseMooncakeLine(path, line_no, line, &r));
    trace.requests.push_back(std::move(r));
    return absl::OkStatus();
  }));
  SortByArrival(trace);
  return trace;
}

absl::StatusOr<Trace> ReadVtcTrace(const std::string& path) {
  ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  RETURN_IF_ERROR(table.RequireColumns(
      {"arrival_s", "tenant", "prompt_len", "output_len"}));
  Trace trace;
  trace.source = path;
  trace.format = "vtc";
  trace.requests.reserve(table.rows().size());
  for (const CsvRow& row : table.rows()) {
    TraceRequest r;
    ASSIGN_OR_RETURN(double arrival, row.GetDouble("arrival_s"));
    if (!std::isfinite(arrival) || arrival < 0 ||
        arrival * kMicrosPerSecond >= kMaxMicros) {
      return LineError(
          path, row.line(),
          absl::StrCat("column 'arrival_s': expected seconds >= 0, got ",
                       arrival));
    }
    r.arrival = FromSeconds(arrival);
    ASSIGN_OR_RETURN(absl::string_view tenant, row.Get("tenant"));
    tenant = absl::StripAsciiWhitespace(tenant);
    if (tenant.empty()) {
      return LineError(path, row.line(), "column 'tenant': empty");
    }
    const bool numeric = std::all_of(tenant.begin(), tenant.end(), [](char c) {
      return absl::ascii_isdigit(static_cast<unsigned char>(c));
    });
    r.tenant = numeric ? absl::StrCat("tenant-", tenant) : std::string(tenant);
    ASSIGN_OR_RETURN(r.input_tokens, GetTokens(row, path, "prompt_len"));
    ASSIGN_OR_RETURN(r.output_tokens, GetTokens(row, path, "output_len"));
    trace.requests.push_back(std::move(r));
  }
  SortByArrival(trace);
  return trace;
}

absl::StatusOr<Trace> ReadAegaeonTrace(const std::string& path) {
  ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  RETURN_IF_ERROR(table.RequireColumns(
      {"Request Time", "Model Name", "Input Length", "Output Length"}));
  Trace trace;
  trace.source = path;
  trace.format = "aegaeon";
  trace.requests.reserve(table.rows().size());
  for (const CsvRow& row : table.rows()) {
    TraceRequest r;
    ASSIGN_OR_RETURN(absl::string_view ts, row.Get("Request Time"));
    // HH:MM:SS.fff from the trace's start.
    const std::vector<absl::string_view> hms =
        absl::StrSplit(absl::StripAsciiWhitespace(ts), ':');
    double h = 0, m = 0, sec = 0;
    if (hms.size() != 3 || !absl::SimpleAtod(hms[0], &h) ||
        !absl::SimpleAtod(hms[1], &m) || !absl::SimpleAtod(hms[2], &sec) ||
        h < 0 || m < 0 || sec < 0 || m >= 60 || sec >= 60) {
      return LineError(path, row.line(),
                       absl::StrCat("column 'Request Time': expected "
                                    "HH:MM:SS.fff, got '",
                                    ts, "'"));
    }
    r.arrival = FromSeconds(h * 3600 + m * 60 + sec);
    ASSIGN_OR_RETURN(absl::string_view model, row.Get("Model Name"));
    model = absl::StripAsciiWhitespace(model);
    if (model.empty()) {
      return LineError(path, row.line(), "column 'Model Name': empty");
    }
    r.model = std::string(model);
    ASSIGN_OR_RETURN(r.input_tokens, GetTokens(row, path, "Input Length"));
    ASSIGN_OR_RETURN(r.output_tokens, GetTokens(row, path, "Output Length"));
    trace.requests.push_back(std::move(r));
  }
  SortByArrival(trace);
  return trace;
}

absl::StatusOr<Trace> ReadTrace(const std::string& format,
                                const std::string& path) {
  if (format == "aegaeon") return ReadAegaeonTrace(path);
  if (format == "azure") return ReadAzureTrace(path);
  if (format == "mooncake") return ReadMooncakeTrace(path);
  if (format == "vtc") return ReadVtcTrace(path);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown trace format '", format,
                   "'; expected one of: ", absl::StrJoin(kTraceFormats, ", ")));
}

void ScaleTrace(Trace& t, double time_scale) {
  CHECK(std::isfinite(time_scale) && time_scale > 0)
      << "ScaleTrace: time_scale must be finite and > 0, got " << time_scale;
  for (TraceRequest& r : t.requests) {
    const double v = static_cast<double>(r.arrival) / time_scale;
    r.arrival =
        v >= kMaxMicros ? static_cast<Micros>(kMaxMicros) : std::llround(v);
  }
}

void TruncateTrace(Trace& t, int64_t max_requests, double max_seconds) {
  if (max_seconds > 0 && max_seconds * kMicrosPerSecond < kMaxMicros) {
    const Micros cutoff = FromSeconds(max_seconds);
    std::erase_if(t.requests,
                  [&](const TraceRequest& r) { return r.arrival >= cutoff; });
  }
  if (max_requests > 0 &&
      static_cast<int64_t>(t.requests.size()) > max_requests) {
    t.requests.resize(static_cast<size_t>(max_requests));
  }
}

}  // namespace gpusched::sim