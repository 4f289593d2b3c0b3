// StaticAssets: answers the dashboard's files, embedded in the binary
// (web/assets.h), without authentication: GET or HEAD of `/` is
// index.html and `/ui/NAME` is the asset NAME (app.js, style.css,
// uPlot.iife.min.js, uPlot.min.css); an unknown /ui/ name is 404, another
// method 405. Responses carry the asset's content type, a strong ETag (its
// content hash) and `Cache-Control: no-cache`, so browsers revalidate and
// get 304 until the binary changes. The page reads everything else from
// /api/v1 with the admin key the user gives it. Stateless; thread-safe.
#ifndef GPUSCHED_API_STATIC_ASSETS_H_
#define GPUSCHED_API_STATIC_ASSETS_H_

#include <memory>

#include "net/http_server.h"

namespace gpusched::api {

namespace http = boost::beast::http;

// True when `request` is for `/` or under `/ui/` and was answered.
bool ServeStaticAsset(const net::HttpRequest& request,
                      const std::shared_ptr<net::Responder>& responder);

}  // namespace gpusched::api

#endif  // GPUSCHED_API_STATIC_ASSETS_H_
