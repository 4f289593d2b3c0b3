#include "cli/table.h"

#include <algorithm>
#include <cstdio>

namespace gpusched {

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string text;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      text += row[i];
      if (i + 1 < row.size()) {
        text += std::string(width[i] - row[i].size() + 2, ' ');
      }
    }
    text += '\n';
  }
  return text;
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::fputs(FormatTable(rows).c_str(), stdout);
}

}  // namespace gpusched
