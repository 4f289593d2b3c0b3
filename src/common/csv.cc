#include "common/csv.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status.h"

namespace gpusched {
namespace {

std::vector<std::string> SplitLine(absl::string_view line) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field.push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(field));
      field.clear();
    } else {
      field.push_back(c);
    }
  }
  out.push_back(std::move(field));
  return out;
}

}  // namespace

absl::Status CsvRow::Error(absl::string_view column,
                           absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(
      header_->name, ":", line_, ": column '", column, "': ", what));
}

absl::StatusOr<absl::string_view> CsvRow::Get(absl::string_view column) const {
  auto it = header_->columns.find(column);
  if (it == header_->columns.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        header_->name, ": no column '", column, "' in the header"));
  }
  if (it->second >= static_cast<int>(fields_.size())) return "";
  return absl::string_view(fields_[it->second]);
}

absl::StatusOr<int64_t> CsvRow::GetInt(absl::string_view column) const {
  auto field = Get(column);
  if (!field.ok()) return field.status();
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*field), &v)) {
    return Error(column,
                 absl::StrCat("expected an integer, got '", *field, "'"));
  }
  return v;
}

absl::StatusOr<double> CsvRow::GetDouble(absl::string_view column) const {
  auto field = Get(column);
  if (!field.ok()) return field.status();
  double v = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(*field), &v)) {
    return Error(column, absl::StrCat("expected a number, got '", *field, "'"));
  }
  return v;
}

absl::StatusOr<CsvTable> CsvTable::ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return Parse(buf.str(), path);
}

absl::Status ForEachLine(
    absl::string_view text,
    absl::FunctionRef<absl::Status(int, absl::string_view)> fn) {
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    RETURN_IF_ERROR(fn(line_no, line));
  }
  return absl::OkStatus();
}

absl::StatusOr<CsvTable> CsvTable::Parse(absl::string_view text,
                                         std::string name) {
  auto header = std::make_shared<csv_internal::Header>();
  header->name = std::move(name);
  CsvTable table;
  bool have_header = false;
  RETURN_IF_ERROR(ForEachLine(text, [&](int line_no, absl::string_view line) {
    std::vector<std::string> fields = SplitLine(line);
    if (!have_header) {
      for (size_t i = 0; i < fields.size(); ++i) {
        std::string col(absl::StripAsciiWhitespace(fields[i]));
        if (!header->columns.emplace(col, static_cast<int>(i)).second) {
          return absl::InvalidArgumentError(absl::StrCat(
              header->name, ":", line_no, ": duplicate column '", col, "'"));
        }
      }
      have_header = true;
      return absl::OkStatus();
    }
    if (fields.size() > header->columns.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(header->name, ":", line_no, ": ", fields.size(),
                       " fields but the header has ", header->columns.size()));
    }
    CsvRow row;
    row.header_ = header;
    row.line_ = line_no;
    row.fields_ = std::move(fields);
    table.rows_.push_back(std::move(row));
    return absl::OkStatus();
  }));
  if (!have_header) {
    return absl::InvalidArgumentError(
        absl::StrCat(header->name, ": empty file, expected a header line"));
  }
  table.header_ = std::move(header);
  return table;
}

absl::Status CsvTable::RequireColumns(
    const std::vector<std::string>& columns) const {
  std::vector<std::string> missing;
  for (const std::string& c : columns) {
    if (!header_->columns.contains(c)) missing.push_back(c);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(header_->name, ":1: missing column(s) ",
                   absl::StrJoin(missing, ", "), " in the header"));
}

}  // namespace gpusched
