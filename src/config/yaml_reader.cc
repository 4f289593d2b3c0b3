#include "config/yaml_reader.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace gpusched::config {

std::string YamlType(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar: {
      // Quote short values whole; a long one (a CSV read as YAML, say) only
      // in part.
      const std::string& v = n.Scalar();
      if (v.size() <= 60) return absl::StrCat("'", v, "'");
      return absl::StrCat("'", v.substr(0, 60), "...' (", v.size(),
                          " characters)");
    }
    case YAML::NodeType::Null:
      return "empty";
    case YAML::NodeType::Undefined:
      return "missing";
  }
  return "unknown";
}

bool ValidName(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status YamlReader::Load(absl::string_view text, YAML::Node* root) {
  try {
    *root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return SyntaxError(e);
  }
  return absl::OkStatus();
}

absl::Status YamlReader::ParseDocument(
    absl::string_view text, absl::FunctionRef<void(const YAML::Node&)> parse) {
  YAML::Node root;
  RETURN_IF_ERROR(Load(text, &root));
  Guarded([&] { parse(root); });
  return Result();
}

namespace {

// Whether `line` is a document marker: "---" or "..." alone or followed by
// a space or tab (YAML 1.2, c-forbidden: a marker at column 0 ends any
// scalar, so splitting there needs no parse).
bool IsMarker(absl::string_view line, absl::string_view marker) {
  return absl::StartsWith(line, marker) &&
         (line.size() == 3 || line[3] == ' ' || line[3] == '\t' ||
          line[3] == '\r');
}

}  // namespace

absl::Status YamlReader::ParseDocuments(
    absl::string_view text, absl::FunctionRef<void(const YAML::Node&)> parse) {
  // Documents split at their markers and loaded one at a time (found by
  // fuzz_manifest: YAML::LoadAll(",") loops for ever, growing its list of
  // documents). A "---" line starts a document (it may carry its content);
  // a "..." line ends one.
  std::vector<std::pair<int, absl::string_view>> docs;  // (first line, text)
  size_t start = 0;
  int start_line = 0;
  int line_no = 0;
  bool content = false;  // the document so far has more than directives

  for (size_t pos = 0; pos <= text.size(); ++line_no) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view line = text.substr(pos, end - pos);
    const size_t next = end + 1;
    if (IsMarker(line, "---") && content) {
      docs.emplace_back(start_line, text.substr(start, pos - start));
      start = pos;
      start_line = line_no;
    } else if (IsMarker(line, "...")) {
      const size_t after = std::min(next, text.size());
      docs.emplace_back(start_line, text.substr(start, after - start));
      start = after;
      start_line = line_no + 1;
      content = false;
      pos = next;
      continue;
    }
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(line);
    if (!stripped.empty() && stripped[0] != '#' && line[0] != '%') {
      content = true;
    }
    pos = next;
  }
  if (start < text.size()) {
    docs.emplace_back(start_line, text.substr(start));
  }
  for (const auto& [first_line, doc_text] : docs) {
    line_offset_ = first_line;
    YAML::Node doc;
    try {
      doc = YAML::Load(std::string(doc_text));
    } catch (const YAML::Exception& e) {
      absl::Status st = SyntaxError(e);
      line_offset_ = 0;
      return st;
    }
    Guarded([&] { parse(doc); });
  }
  line_offset_ = 0;
  return Result();
}

absl::Status YamlReader::SyntaxError(const YAML::Exception& e) const {
  return absl::InvalidArgumentError(
      absl::StrCat(source_, ":", e.mark.line + 1 + line_offset_,
                   ": YAML syntax error: ", e.msg));
}

void YamlReader::Guarded(absl::FunctionRef<void()> parse) {
  try {
    parse();
  } catch (const YAML::Exception& e) {
    Error(e.mark, absl::StrCat("cannot read the document: ", e.msg));
  }
}

absl::Status YamlReader::Result() const {
  if (errors_.empty()) return absl::OkStatus();
  // Readers check fields in their own order; people read files top down.
  std::vector<std::pair<int, std::string>> sorted = errors_;
  std::stable_sort(
      sorted.begin(), sorted.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  return absl::InvalidArgumentError(absl::StrJoin(
      sorted, "\n",
      [](std::string* out, const auto& e) { out->append(e.second); }));
}

void YamlReader::Error(const YAML::Mark& mark, absl::string_view what) {
  if (mark.is_null()) {
    errors_.emplace_back(0, absl::StrCat(source_, ": ", what));
  } else {
    const int line = mark.line + 1 + line_offset_;
    errors_.emplace_back(line, absl::StrCat(source_, ":", line, ": ", what));
  }
}

void YamlReader::Error(const YAML::Node& at, absl::string_view what) {
  Error(at.Mark(), what);
}

void YamlReader::CheckKeys(const YAML::Node& map, absl::string_view where,
                           const std::vector<absl::string_view>& known) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      Error(it->first,
            absl::StrCat("unknown field '", key, "' in ", where,
                         " (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
}

bool YamlReader::Scalar(const YAML::Node& n, absl::string_view field,
                        std::string* out) {
  if (!n.IsScalar()) {
    Error(n, absl::StrCat(field, " must be a value, got ", YamlType(n)));
    return false;
  }
  *out = n.Scalar();
  return true;
}

bool YamlReader::Int(const YAML::Node& n, absl::string_view field, int64_t lo,
                     int64_t hi, int64_t* out) {
  std::string s;
  if (!Scalar(n, field, &s)) return false;
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v)) {
    Error(n, absl::StrCat(field, " must be an integer, got '", s, "'"));
    return false;
  }
  if (v < lo || v > hi) {
    Error(n, absl::StrCat(field, " must be in ", lo, "..", hi, ", got ", v));
    return false;
  }
  *out = v;
  return true;
}

bool YamlReader::Double(const YAML::Node& n, absl::string_view field, double lo,
                        double hi, double* out) {
  std::string s;
  if (!Scalar(n, field, &s)) return false;
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || !std::isfinite(v)) {
    Error(n, absl::StrCat(field, " must be a number, got '", s, "'"));
    return false;
  }
  if (v < lo || v > hi) {
    Error(n, absl::StrCat(field, " must be in ", lo, "..", hi, ", got ", s));
    return false;
  }
  *out = v;
  return true;
}

bool YamlReader::Bool(const YAML::Node& n, absl::string_view field, bool* out) {
  std::string s;
  if (!Scalar(n, field, &s)) return false;
  const std::string v = absl::AsciiStrToLower(s);
  if (v == "true" || v == "yes" || v == "on") {
    *out = true;
  } else if (v == "false" || v == "no" || v == "off") {
    *out = false;
  } else {
    Error(n, absl::StrCat(field, " must be true or false, got '", s, "'"));
    return false;
  }
  return true;
}

bool YamlReader::Quantity(const YAML::Node& n, absl::string_view field,
                          std::optional<int64_t> (*parse)(absl::string_view),
                          absl::string_view example, int64_t* out) {
  std::string s;
  if (!Scalar(n, field, &s)) return false;
  const std::optional<int64_t> v = parse(s);
  if (!v) {
    Error(n, absl::StrCat(field, ": '", s, "' is not a quantity (e.g. ",
                          example, ")"));
    return false;
  }
  *out = *v;
  return true;
}

void YamlReader::OptString(const YAML::Node& map, const char* key,
                           std::string* out) {
  if (const YAML::Node n = map[key]) Scalar(n, key, out);
}

void YamlReader::OptInt(const YAML::Node& map, const char* key, int64_t lo,
                        int64_t hi, int64_t* out) {
  if (const YAML::Node n = map[key]) Int(n, key, lo, hi, out);
}

void YamlReader::OptInt(const YAML::Node& map, const char* key, int lo, int hi,
                        int* out) {
  int64_t v = *out;
  if (const YAML::Node n = map[key]; n && Int(n, key, lo, hi, &v)) {
    *out = static_cast<int>(v);
  }
}

void YamlReader::OptDouble(const YAML::Node& map, const char* key, double lo,
                           double hi, double* out) {
  if (const YAML::Node n = map[key]) Double(n, key, lo, hi, out);
}

void YamlReader::OptBool(const YAML::Node& map, const char* key, bool* out) {
  if (const YAML::Node n = map[key]) Bool(n, key, out);
}

}  // namespace gpusched::config
