#include "api/static_assets.h"

#include <string>
#include <string_view>

#include "web/assets.h"

namespace gpusched::api {

namespace {

constexpr std::string_view kUiPrefix = "/ui/";

net::HttpResponse Plain(http::status status, unsigned version,
                        std::string_view text) {
  net::HttpResponse res{status, version};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.body() = std::string(text);
  return res;
}

}  // namespace

bool ServeStaticAsset(const net::HttpRequest& req,
                      const std::shared_ptr<net::Responder>& r) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  std::string_view name;
  if (path == "/") {
    name = "index.html";
  } else if (path.starts_with(kUiPrefix)) {
    name = path.substr(kUiPrefix.size());
  } else {
    return false;
  }
  const unsigned version = req.version();
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    net::HttpResponse res =
        Plain(http::status::method_not_allowed, version,
              "the dashboard's files answer GET and HEAD\n");
    res.set(http::field::allow, "GET, HEAD");
    r->Send(std::move(res));
    return true;
  }
  const web::Asset* asset = web::FindAsset(name);
  if (asset == nullptr) {
    r->Send(Plain(http::status::not_found, version,
                  "no such dashboard asset; the dashboard is at /\n"));
    return true;
  }
  net::HttpResponse res{http::status::ok, version};
  res.set(http::field::etag, std::string(asset->etag));
  res.set(http::field::cache_control, "no-cache");
  res.set("X-Content-Type-Options", "nosniff");
  const auto inm = req[http::field::if_none_match];
  if (std::string_view(inm.data(), inm.size()).find(asset->etag) !=
      std::string_view::npos) {
    res.result(http::status::not_modified);
    r->Send(std::move(res));
    return true;
  }
  res.set(http::field::content_type, std::string(asset->content_type));
  // HEAD: the headers only (the server sets Content-Length from the body).
  if (req.method() == http::verb::get) res.body() = std::string(asset->data);
  r->Send(std::move(res));
  return true;
}

}  // namespace gpusched::api
