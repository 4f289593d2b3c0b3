// YamlReader: the shared base of gpusched's manifest parsers.
//
// Collects every problem as "file:line: what" (not just the first), checks
// for unknown keys, and reads typed scalars with range checks. yaml-cpp
// throws; the throwing calls are wrapped here and in the parsers' Parse()
// entry points, so nothing escapes config/. Thread-compatible.
#ifndef GPUSCHED_CONFIG_YAML_READER_H_
#define GPUSCHED_CONFIG_YAML_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace gpusched::config {

// "a map", "a list", "'value'", "empty": for messages.
std::string YamlType(const YAML::Node& n);
// Letters, digits, '.', '_', '-'; 1 to 253 characters.
bool ValidName(absl::string_view s);

class YamlReader {
 public:
  explicit YamlReader(std::string source) : source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  // Parses `text`; a syntax error is returned with its line.
  absl::Status Load(absl::string_view text, YAML::Node* root);
  // Loads `text` and runs `parse` on its root; a yaml-cpp exception becomes
  // an error at its mark (the accessors parsers use do not throw on valid
  // nodes, so this is defensive). Returns Result().
  absl::Status ParseDocument(absl::string_view text,
                             absl::FunctionRef<void(const YAML::Node&)> parse);
  // The same over a `---`-separated stream: `parse` runs on each document's
  // root in order (Line() and messages count lines from the start of
  // `text`). Each document is loaded on its own: yaml-cpp's LoadAll never
  // returns on some malformed streams (a document that starts with ',').
  absl::Status ParseDocuments(absl::string_view text,
                              absl::FunctionRef<void(const YAML::Node&)> parse);
  // OK, or every error collected, one per line, in file order.
  absl::Status Result() const;
  bool has_errors() const { return !errors_.empty(); }
  // Takes every error another reader (over the same text) collected.
  void TakeErrors(YamlReader& other) {
    errors_.insert(errors_.end(), other.errors_.begin(), other.errors_.end());
    other.errors_.clear();
  }

  // The 1-based line of `n` in the whole text.
  int Line(const YAML::Node& n) const {
    return n.Mark().line + 1 + line_offset_;
  }

  void Error(const YAML::Mark& mark, absl::string_view what);
  void Error(const YAML::Node& at, absl::string_view what);
  // Flags keys of `map` not in `known`.
  void CheckKeys(const YAML::Node& map, absl::string_view where,
                 const std::vector<absl::string_view>& known);
  bool Scalar(const YAML::Node& n, absl::string_view field, std::string* out);
  bool Int(const YAML::Node& n, absl::string_view field, int64_t lo, int64_t hi,
           int64_t* out);
  bool Double(const YAML::Node& n, absl::string_view field, double lo,
              double hi, double* out);
  bool Bool(const YAML::Node& n, absl::string_view field, bool* out);
  // A Kubernetes quantity (config/quantity.h) read by `parse`; `example`
  // goes into the message when it is malformed.
  bool Quantity(const YAML::Node& n, absl::string_view field,
                std::optional<int64_t> (*parse)(absl::string_view),
                absl::string_view example, int64_t* out);

  // Optional fields of `map`: leave `out` unchanged when absent.
  void OptString(const YAML::Node& map, const char* key, std::string* out);
  void OptInt(const YAML::Node& map, const char* key, int64_t lo, int64_t hi,
              int64_t* out);
  void OptInt(const YAML::Node& map, const char* key, int lo, int hi, int* out);
  void OptDouble(const YAML::Node& map, const char* key, double lo, double hi,
                 double* out);
  void OptBool(const YAML::Node& map, const char* key, bool* out);

 private:
  // Runs `parse`, turning a yaml-cpp exception into an error at its mark.
  void Guarded(absl::FunctionRef<void()> parse);
  absl::Status SyntaxError(const YAML::Exception& e) const;

  std::string source_;
  std::vector<std::pair<int, std::string>> errors_;  // (line, message)
  int line_offset_ = 0;  // lines before the document being read
};

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_YAML_READER_H_
