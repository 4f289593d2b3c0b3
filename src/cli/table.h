// Plain-text tables for the CLI's human-readable output.
#ifndef GPUSCHED_CLI_TABLE_H_
#define GPUSCHED_CLI_TABLE_H_

#include <string>
#include <vector>

namespace gpusched {

// Rows with columns padded to their widest cell, two spaces apart, one line
// each ending in '\n'.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// FormatTable to stdout.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

}  // namespace gpusched

#endif  // GPUSCHED_CLI_TABLE_H_
