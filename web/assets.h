// The dashboard's files (web/*.html|js|css and uPlot from
// web/node_modules), embedded into the binary at build time by
// cmake/embed_files.cmake. Immutable static data; thread-safe.
// api/static_assets.h serves them over HTTP; the simulator's HTML reports
// inline uPlot from here.
#ifndef GPUSCHED_WEB_ASSETS_H_
#define GPUSCHED_WEB_ASSETS_H_

#include <span>
#include <string_view>

namespace gpusched::web {

struct Asset {
  std::string_view name;          // "app.js", "uPlot.iife.min.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view etag;          // quoted content hash: "\"0123abcd...\""
  std::string_view data;
};

std::span<const Asset> Assets();

// The asset called `name`, or nullptr.
inline const Asset* FindAsset(std::string_view name) {
  for (const Asset& a : Assets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

}  // namespace gpusched::web

#endif  // GPUSCHED_WEB_ASSETS_H_
