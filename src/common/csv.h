// A small reader for the comma-separated trace files gpusched consumes
// (Alibaba node and pod lists, later request traces).
//
// Columns are looked up by header name, so extra or reordered columns are
// fine. Every error names the file, the 1-based line and the column.
// Quoted fields with embedded commas are supported; embedded newlines are not
// (none of our traces use them). Thread-compatible.
#ifndef GPUSCHED_COMMON_CSV_H_
#define GPUSCHED_COMMON_CSV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpusched {

// Calls fn(line_number, line) for each non-blank line of `text` (1-based
// numbers, CR stripped); stops at and returns the first error.
absl::Status ForEachLine(
    absl::string_view text,
    absl::FunctionRef<absl::Status(int, absl::string_view)> fn);

class CsvTable;

namespace csv_internal {
struct Header {
  std::string name;
  absl::flat_hash_map<std::string, int> columns;
};
}  // namespace csv_internal

// One data row; shares its table's header, so it stays valid on its own.
class CsvRow {
 public:
  int line() const { return line_; }
  // The raw field of `column`; error if the header has no such column.
  absl::StatusOr<absl::string_view> Get(absl::string_view column) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view column) const;
  absl::StatusOr<double> GetDouble(absl::string_view column) const;

 private:
  friend class CsvTable;
  absl::Status Error(absl::string_view column, absl::string_view what) const;
  std::shared_ptr<const csv_internal::Header> header_;
  int line_ = 0;
  std::vector<std::string> fields_;
};

class CsvTable {
 public:
  // Reads `path`; the first line is the header. Blank lines are skipped.
  static absl::StatusOr<CsvTable> ReadFile(const std::string& path);
  // Parses `text` as if read from a file called `name` (for tests).
  static absl::StatusOr<CsvTable> Parse(absl::string_view text,
                                        std::string name);

  const std::string& name() const { return header_->name; }
  const std::vector<CsvRow>& rows() const { return rows_; }
  bool HasColumn(absl::string_view column) const {
    return header_->columns.contains(column);
  }
  // Error unless every listed column is in the header.
  absl::Status RequireColumns(const std::vector<std::string>& columns) const;

 private:
  std::shared_ptr<const csv_internal::Header> header_;
  std::vector<CsvRow> rows_;
};

}  // namespace gpusched

#endif  // GPUSCHED_COMMON_CSV_H_
