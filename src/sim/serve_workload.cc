// `gpusched sim serve`'s workload generators (sim/serve_trace.h): the
// ServeGen dataset's per-client arrival and length distributions, and the
// synthetic workload (Poisson, gamma, Weibull arrivals).
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
#include "sim/serve_trace.h"
#include "sim/serve_trace_internal.h"

namespace gpusched::sim {
namespace {

using trace_internal::kInt32Max;
using trace_internal::LineError;
using trace_internal::ParseFinite;
using trace_internal::ParseInt;
using trace_internal::ReadFileToString;
using trace_internal::SortByArrival;

// 1-based line of byte `offset` in `text`.
int LineOf(absl::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(
                 std::count(text.begin(), text.begin() + offset, '\n'));
}

// ---- Random draws -----------------------------------------------------------

// Uniform in (0, 1].
double OpenUniform(Rng& rng) { return 1.0 - rng.UniformDouble(); }

double Exponential(Rng& rng) { return -std::log1p(-rng.UniformDouble()); }

// Marsaglia's polar method (the second value is dropped: no hidden state).
double Normal(Rng& rng) {
  for (;;) {
    const double u = 2 * rng.UniformDouble() - 1;
    const double v = 2 * rng.UniformDouble() - 1;
    const double s = u * u + v * v;
    if (s > 0 && s < 1) return u * std::sqrt(-2 * std::log(s) / s);
  }
}

// Gamma(shape, 1): Marsaglia and Tsang (2000); shape < 1 by boosting.
double StandardGamma(Rng& rng, double shape) {
  if (shape < 1) {
    return StandardGamma(rng, shape + 1) *
           std::pow(OpenUniform(rng), 1 / shape);
  }
  const double d = shape - 1.0 / 3;
  const double c = 1 / std::sqrt(9 * d);
  for (;;) {
    double x, v;
    do {
      x = Normal(rng);
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = OpenUniform(rng);
    if (u < 1 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
  }
}

double Weibull(Rng& rng, double shape, double scale) {
  return scale * std::pow(Exponential(rng), 1 / shape);
}

// ---- ServeGen dataset
// --------------------------------------------------------

// Parses a Python dict literal of int -> float, "{12: 0.5, 40: 5e-01}".
// Errors say where in the string (0-based character) things went wrong.
absl::StatusOr<std::vector<std::pair<int64_t, double>>> ParsePmfDict(
    absl::string_view s) {
  std::vector<std::pair<int64_t, double>> out;
  size_t pos = 0;
  auto space = [&] {
    while (pos < s.size() &&
           absl::ascii_isspace(static_cast<unsigned char>(s[pos]))) {
      ++pos;
    }
  };
  auto token = [&] {
    space();
    const size_t start = pos;
    while (pos < s.size() && s[pos] != ':' && s[pos] != ',' && s[pos] != '}' &&
           !absl::ascii_isspace(static_cast<unsigned char>(s[pos]))) {
      ++pos;
    }
    return s.substr(start, pos - start);
  };
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " at character ", pos));
  };
  space();
  if (pos >= s.size() || s[pos] != '{') return fail("expected '{'");
  ++pos;
  for (;;) {
    space();
    if (pos < s.size() && s[pos] == '}') break;
    const absl::string_view key = token();
    int64_t k = 0;
    if (!ParseInt(key, &k) || k < 0 || k > kInt32Max) {
      return fail(absl::StrCat("expected a token count, got '", key, "'"));
    }
    space();
    if (pos >= s.size() || s[pos] != ':') return fail("expected ':'");
    ++pos;
    const absl::string_view val = token();
    double p = 0;
    if (!ParseFinite(val, &p) || p < 0) {
      return fail(absl::StrCat("expected a probability, got '", val, "'"));
    }
    out.emplace_back(k, p);
    space();
    if (pos < s.size() && s[pos] == ',') {
      ++pos;
      continue;
    }
    space();
    if (pos >= s.size() || s[pos] != '}') return fail("expected ',' or '}'");
    break;
  }
  ++pos;
  space();
  if (pos != s.size()) return fail("unexpected text after '}'");
  return out;
}

absl::StatusOr<LengthPmf> MakePmf(std::vector<std::pair<int64_t, double>> pts) {
  std::sort(pts.begin(), pts.end());
  LengthPmf pmf;
  double total = 0;
  for (size_t i = 0; i < pts.size(); ++i) {
    if (i > 0 && pts[i].first == pts[i - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat("length ", pts[i].first, " appears twice"));
    }
    if (pts[i].second <= 0) continue;
    total += pts[i].second;
    pmf.values.push_back(static_cast<int32_t>(pts[i].first));
    pmf.cdf.push_back(total);
  }
  if (pmf.values.empty() || std::abs(total - 1) > 1e-3) {
    return absl::InvalidArgumentError(
        absl::StrCat("probabilities sum to ", total, ", expected 1"));
  }
  for (double& c : pmf.cdf) c /= total;
  pmf.cdf.back() = 1;
  return pmf;
}

// The line of nlohmann's first syntax error (it reports a byte offset).
class SyntaxErrorLocator : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) override {
    position_ = position;
    message_ = ex.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: x"
    const size_t colon = message_.find(": ");
    if (colon != std::string::npos) message_ = message_.substr(colon + 2);
    return false;
  }
  size_t position() const { return position_; }
  const std::string& message() const { return message_; }

 private:
  size_t position_ = 0;
  std::string message_ = "syntax error";
};

// The line where `"key"` first appears, and then `"field"` after it: exact
// for the upstream files (one key per line), best effort otherwise.
int KeyLine(absl::string_view text, absl::string_view key,
            absl::string_view field = "") {
  size_t pos = text.find(absl::StrCat("\"", key, "\""));
  if (pos == absl::string_view::npos) return 1;
  if (!field.empty()) {
    const size_t f = text.find(absl::StrCat("\"", field, "\""), pos);
    if (f != absl::string_view::npos) pos = f;
  }
  return LineOf(text, pos);
}

// ---- Synthetic
// ----------------------------------------------------------------

struct TenantInputs {
  std::vector<ServeGenWindow> windows;   // servegen arrivals
  std::vector<ServeGenLengths> lengths;  // servegen dataset
};

const ServeGenLengths& LengthsAt(const std::vector<ServeGenLengths>& ls,
                                 double t) {
  auto it = std::upper_bound(
      ls.begin(), ls.end(), t,
      [](double v, const ServeGenLengths& l) { return v < l.start_s; });
  return it == ls.begin() ? ls.front() : *(it - 1);
}

absl::Status CheckLengths(absl::string_view which, int32_t lo, int32_t hi,
                          int32_t min_lo) {
  if (lo < min_lo) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, "_tokens must be >= ", min_lo, ", got ", lo));
  }
  if (hi < 0 || (hi > 0 && hi < lo)) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, "_max must be 0 (fixed) or >= ", which, "_tokens (",
                     lo, "), got ", hi));
  }
  return absl::OkStatus();
}

int32_t DrawLength(Rng& rng, int32_t lo, int32_t hi) {
  if (hi <= lo) return lo;
  return lo +
         static_cast<int32_t>(rng.Uniform(static_cast<uint64_t>(hi - lo) + 1));
}

absl::Status TooMany(absl::string_view tenant) {
  return absl::InvalidArgumentError(absl::StrCat(
      "tenant '", tenant, "': the workload exceeds ", kMaxSyntheticRequests,
      " requests; shorten duration_s or lower the rate"));
}

// Arrival times (seconds from the workload start) of one tenant.
absl::Status GenerateArrivals(const SyntheticTenant& t, const TenantInputs& in,
                              double duration, int64_t budget, Rng& rng,
                              std::vector<double>* times) {
  if (t.arrival == "poisson" || t.arrival == "gamma") {
    if (t.rate * duration > static_cast<double>(budget)) return TooMany(t.name);
    const bool poisson = t.arrival == "poisson";
    // A Gamma law with CV below 1e-6 is evenly spaced for any practical
    // purpose (and its shape 1/cv^2 would overflow).
    const bool even = !poisson && t.cv < 1e-6;
    const double shape = poisson || even ? 0 : 1 / (t.cv * t.cv);
    const double scale = poisson || even ? 0 : t.cv * t.cv / t.rate;
    double now = 0;
    for (;;) {
      double gap;
      if (poisson) {
        gap = Exponential(rng) / t.rate;
      } else if (even) {
        gap = 1 / t.rate;
      } else {
        gap = StandardGamma(rng, shape) * scale;
      }
      now += gap;
      if (!(now < duration)) break;
      if (static_cast<int64_t>(times->size()) >= budget) return TooMany(t.name);
      times->push_back(now);
    }
    return absl::OkStatus();
  }
  // servegen: each window's gaps, rescaled to fill the part of the window
  // inside [offset, offset + duration).
  const double offset = t.servegen_offset_s;
  std::vector<double> gaps;
  for (const ServeGenWindow& w : in.windows) {
    if (w.pattern == ServeGenWindow::Pattern::kIdle || w.rate <= 0) continue;
    const double a = std::max(w.start_s, offset);
    const double b = std::min(w.start_s + w.length_s, offset + duration);
    if (!(b > a)) continue;
    const double len = b - a;
    const double expected = w.rate * t.servegen_rate_scale * len;
    if (expected > static_cast<double>(budget)) return TooMany(t.name);
    int64_t n = static_cast<int64_t>(std::floor(expected));
    if (rng.UniformDouble() < expected - static_cast<double>(n)) ++n;
    if (n == 0) continue;
    if (static_cast<int64_t>(times->size()) + n > budget) {
      return TooMany(t.name);
    }
    // n + 1 gaps: n arrivals inside the window, the last gap closing it.
    gaps.resize(n + 1);
    double sum = 0;
    for (double& g : gaps) {
      g = w.pattern == ServeGenWindow::Pattern::kGamma
              ? StandardGamma(rng, w.shape) * w.scale
              : Weibull(rng, w.shape, w.scale);
      sum += g;
    }
    if (!(sum > 0) || !std::isfinite(sum)) {  // all gaps underflowed
      std::fill(gaps.begin(), gaps.end(), 1.0);
      sum = static_cast<double>(gaps.size());
    }
    double cum = 0;
    for (int64_t k = 0; k < n; ++k) {
      cum += gaps[k];
      times->push_back(a - offset + len * (cum / sum));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// ---- ServeGen
// ------------------------------------------------------------------

absl::StatusOr<std::vector<ServeGenWindow>> ReadServeGenTrace(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::vector<ServeGenWindow> windows;
  RETURN_IF_ERROR(ForEachLine(text, [&](int line_no, absl::string_view line) {
    auto fail = [&](absl::string_view what) {
      return LineError(path, line_no, what);
    };
    const std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() != 6) {
      return fail(absl::StrCat(
          "expected 6 fields timestamp,rate,cv,pattern,shape,scale, got ",
          f.size()));
    }
    static constexpr const char* kNames[] = {"timestamp", "rate",  "cv",
                                             "pattern",   "shape", "scale"};
    double v[6] = {0, 0, 0, 0, 0, 0};
    for (int i : {0, 1, 2, 4, 5}) {
      const absl::string_view s = absl::StripAsciiWhitespace(f[i]);
      if (s.empty() && i >= 2) continue;  // idle rows may leave these out
      if (!ParseFinite(s, &v[i]) || v[i] < 0) {
        return fail(
            absl::StrCat(kNames[i], ": expected a number >= 0, got '", s, "'"));
      }
    }
    ServeGenWindow w;
    w.start_s = v[0];
    w.rate = v[1];
    w.cv = v[2];
    w.shape = v[4];
    w.scale = v[5];
    const absl::string_view pattern = absl::StripAsciiWhitespace(f[3]);
    if (pattern == "Gamma") {
      w.pattern = ServeGenWindow::Pattern::kGamma;
    } else if (pattern == "Weibull") {
      w.pattern = ServeGenWindow::Pattern::kWeibull;
    } else if (!pattern.empty()) {
      return fail(absl::StrCat("pattern: expected Gamma or Weibull, got '",
                               pattern, "'"));
    }
    if (w.rate > 0) {
      if (w.pattern == ServeGenWindow::Pattern::kIdle) {
        return fail("rate > 0 needs a pattern (Gamma or Weibull)");
      }
      if (!(w.shape > 0) || !(w.scale > 0)) {
        return fail(
            absl::StrCat("rate > 0 needs shape > 0 and scale > 0, "
                         "got shape ",
                         w.shape, ", scale ", w.scale));
      }
    } else {
      w.pattern = ServeGenWindow::Pattern::kIdle;
    }
    if (!windows.empty() && !(w.start_s > windows.back().start_s)) {
      return fail(absl::StrCat("timestamp ", w.start_s,
                               " does not follow the previous row's ",
                               windows.back().start_s));
    }
    windows.push_back(w);
    return absl::OkStatus();
  }));
  for (size_t i = 0; i + 1 < windows.size(); ++i) {
    windows[i].length_s = windows[i + 1].start_s - windows[i].start_s;
  }
  if (windows.size() >= 2) {
    windows.back().length_s = windows[windows.size() - 2].length_s;
  }
  return windows;
}

int32_t LengthPmf::Sample(Rng& rng) const {
  const double u = rng.UniformDouble();
  const size_t i = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
  return values[std::min(i, values.size() - 1)];
}

double LengthPmf::Mean() const {
  double mean = 0, prev = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    mean += values[i] * (cdf[i] - prev);
    prev = cdf[i];
  }
  return mean;
}

absl::StatusOr<std::vector<ServeGenLengths>> ReadServeGenDataset(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  const nlohmann::ordered_json doc =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    SyntaxErrorLocator locator;
    nlohmann::json::sax_parse(text, &locator);
    return LineError(
        path, LineOf(text, locator.position() > 0 ? locator.position() - 1 : 0),
        absl::StrCat("invalid JSON: ", locator.message()));
  }
  if (!doc.is_object()) {
    return LineError(path, 1, "expected a JSON object keyed by window start");
  }
  std::vector<ServeGenLengths> out;
  for (const auto& [key, fields] : doc.items()) {
    double start = 0;
    if (!ParseFinite(key, &start) || start < 0) {
      return LineError(path, KeyLine(text, key),
                       absl::StrCat("window key '", key,
                                    "': expected a start time in seconds"));
    }
    if (!fields.is_object()) {
      return LineError(path, KeyLine(text, key),
                       absl::StrCat("window ", key, ": expected an object"));
    }
    ServeGenLengths l;
    l.start_s = start;
    bool empty = false;
    for (const char* field : {"input_tokens", "output_tokens"}) {
      auto it = fields.find(field);
      if (it == fields.end() || !it->is_string()) {
        return LineError(path, KeyLine(text, key),
                         absl::StrCat("window ", key, ": no ", field,
                                      " PMF string (multimodal datasets, with "
                                      "text_tokens, are not supported)"));
      }
      auto points = ParsePmfDict(it->get_ref<const std::string&>());
      if (points.ok() && points->empty()) {
        empty = true;
        continue;
      }
      absl::StatusOr<LengthPmf> pmf =
          points.ok() ? MakePmf(*std::move(points)) : points.status();
      if (!pmf.ok()) {
        return LineError(path, KeyLine(text, key, field),
                         absl::StrCat("window ", key, " ", field, ": ",
                                      pmf.status().message()));
      }
      (std::string_view(field) == "input_tokens" ? l.input : l.output) =
          *std::move(pmf);
    }
    if (!empty) out.push_back(std::move(l));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ServeGenLengths& a, const ServeGenLengths& b) {
                     return a.start_s < b.start_s;
                   });
  return out;
}

// ---- Synthetic
// -----------------------------------------------------------------

absl::StatusOr<Trace> GenerateSynthetic(const SyntheticWorkload& w) {
  if (!std::isfinite(w.duration_s) || w.duration_s <= 0 || w.duration_s > 1e9) {
    return absl::InvalidArgumentError(absl::StrCat(
        "duration_s must be in (0, 1e9] seconds, got ", w.duration_s));
  }
  if (w.tenants.empty()) {
    return absl::InvalidArgumentError("a synthetic workload needs a tenant");
  }
  Trace trace;
  trace.source = "synthetic";
  trace.format = "synthetic";
  const Micros end = FromSeconds(w.duration_s);
  Rng seeds(w.seed);
  for (size_t i = 0; i < w.tenants.size(); ++i) {
    const SyntheticTenant& t = w.tenants[i];
    // Drawn before any validation so every tenant's streams depend only on
    // the seed and its position.
    Rng arrival_rng(seeds.Next());
    Rng length_rng(seeds.Next());
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenant ", i + 1, " '", t.name, "': ", what));
    };
    if (t.name.empty()) return bad("name is empty");
    TenantInputs in;
    if (t.arrival == "poisson" || t.arrival == "gamma") {
      if (!std::isfinite(t.rate) || t.rate <= 0) {
        return bad(absl::StrCat("rate must be > 0 req/s, got ", t.rate));
      }
      if (t.arrival == "gamma" && (!std::isfinite(t.cv) || t.cv < 0)) {
        return bad(absl::StrCat("cv must be >= 0, got ", t.cv));
      }
    } else if (t.arrival == "servegen") {
      if (t.servegen_trace.empty()) {
        return bad("arrival servegen needs servegen_trace");
      }
      if (!std::isfinite(t.servegen_offset_s) || t.servegen_offset_s < 0) {
        return bad(absl::StrCat("servegen_offset_s must be >= 0, got ",
                                t.servegen_offset_s));
      }
      if (!std::isfinite(t.servegen_rate_scale) || t.servegen_rate_scale < 0) {
        return bad(absl::StrCat("servegen_rate_scale must be >= 0, got ",
                                t.servegen_rate_scale));
      }
      ASSIGN_OR_RETURN(in.windows, ReadServeGenTrace(t.servegen_trace));
    } else {
      return bad(absl::StrCat("unknown arrival '", t.arrival,
                              "'; expected poisson, gamma or servegen"));
    }
    if (!t.servegen_dataset.empty()) {
      ASSIGN_OR_RETURN(in.lengths, ReadServeGenDataset(t.servegen_dataset));
      if (in.lengths.empty()) {
        return bad(
            absl::StrCat(t.servegen_dataset, ": no window has length PMFs"));
      }
    } else {
      absl::Status s = CheckLengths("input", t.input_tokens, t.input_max, 1);
      if (s.ok()) s = CheckLengths("output", t.output_tokens, t.output_max, 0);
      if (!s.ok()) return bad(s.message());
    }

    std::vector<double> times;
    RETURN_IF_ERROR(GenerateArrivals(
        t, in, w.duration_s,
        kMaxSyntheticRequests - static_cast<int64_t>(trace.requests.size()),
        arrival_rng, &times));
    for (double at : times) {
      TraceRequest r;
      r.arrival = std::min(FromSeconds(at), end - 1);
      r.tenant = t.name;
      r.model = t.model;
      if (!in.lengths.empty()) {
        const ServeGenLengths& l =
            LengthsAt(in.lengths, t.servegen_offset_s + at);
        r.input_tokens = l.input.Sample(length_rng);
        r.output_tokens = l.output.Sample(length_rng);
      } else {
        r.input_tokens = DrawLength(length_rng, t.input_tokens, t.input_max);
        r.output_tokens = DrawLength(length_rng, t.output_tokens, t.output_max);
      }
      trace.requests.push_back(std::move(r));
    }
  }
  // Stable: equal arrivals keep tenant order, then generation order.
  SortByArrival(trace);
  return trace;
}

}  // namespace gpusched::sim
