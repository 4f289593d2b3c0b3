#include "api/control_api.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "config/manifest.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {

using nlohmann::json;

namespace {

constexpr char kPrefix[] = "/api/v1";

net::HttpResponse Json(http::status status, const json& body) {
  net::HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return res;
}

http::status StatusOf(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kNotFound:
      return http::status::not_found;
    case absl::StatusCode::kInvalidArgument:
      return http::status::unprocessable_entity;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return http::status::conflict;
    case absl::StatusCode::kPermissionDenied:
      return http::status::forbidden;
    case absl::StatusCode::kUnauthenticated:
      return http::status::unauthorized;
    default:
      return http::status::internal_server_error;
  }
}

// {"error": {"message", "type", "problems"?}}: problems are the lines of a
// multi-line InvalidArgument.
net::HttpResponse Error(http::status status, const std::string& message,
                        const std::string& type = "") {
  json err = {{"message", message},
              {"type", type.empty() ? std::string(http::obsolete_reason(status))
                                    : type}};
  if (status == http::status::unprocessable_entity) {
    std::vector<std::string> problems = absl::StrSplit(message, '\n');
    err["problems"] = problems;
    err["message"] =
        problems.size() == 1
            ? problems.front()
            : absl::StrCat("the manifests are invalid (", problems.size(),
                           " problems); nothing was changed");
  }
  return Json(status, json{{"error", err}});
}

net::HttpResponse Error(const absl::Status& st) {
  return Error(StatusOf(st), std::string(st.message()));
}

std::string Query(const std::string& target, const std::string& key) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  for (absl::string_view kv :
       absl::StrSplit(absl::string_view(target).substr(q + 1), '&')) {
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == key) {
      return eq == absl::string_view::npos ? ""
                                           : std::string(kv.substr(eq + 1));
    }
  }
  return "";
}

std::vector<std::string> QueryAll(const std::string& target,
                                  const std::string& key) {
  std::vector<std::string> out;
  const size_t q = target.find('?');
  if (q == std::string::npos) return out;
  for (absl::string_view kv :
       absl::StrSplit(absl::string_view(target).substr(q + 1), '&')) {
    const size_t eq = kv.find('=');
    if (eq != absl::string_view::npos && kv.substr(0, eq) == key) {
      out.emplace_back(kv.substr(eq + 1));
    }
  }
  return out;
}

json KeyJson(const runtime::KeyInfo& k) {
  json j = {{"id", k.key_id},   {"tenant", k.tenant},   {"name", k.name},
            {"admin", k.admin}, {"created", k.created}, {"revoked", nullptr}};
  if (k.revoked) j["revoked"] = *k.revoked;
  return j;
}

json EventJson(const runtime::Event& e) {
  return {{"id", e.id},
          {"time", IsoTime(e.time)},
          {"timeMicros", e.time},
          {"kind", e.kind},
          {"deployment", e.deployment},
          {"tenant", e.tenant},
          {"message", e.message},
          {"details", e.details}};
}

}  // namespace

bool ControlApi::Handle(net::HttpRequest& req,
                        std::shared_ptr<net::Responder>& r) {
  const std::string full(req.target());
  const std::string path = full.substr(0, full.find('?'));
  if (path != kPrefix && !absl::StartsWith(path, absl::StrCat(kPrefix, "/"))) {
    return false;
  }
  const std::string_view auth(req[http::field::authorization].data(),
                              req[http::field::authorization].size());
  if (!auth.starts_with("Bearer ")) {
    r->Send(Error(http::status::unauthorized,
                  "missing API key: send 'Authorization: Bearer <key>'",
                  "authentication_error"));
    return true;
  }
  auto key = keys_->Authenticate(auth.substr(7));
  if (!key.ok()) {
    r->Send(Error(http::status::unauthorized,
                  std::string(key.status().message()), "authentication_error"));
    return true;
  }
  // /api/v1/<a>/<b>/<c>
  std::vector<std::string> parts =
      absl::StrSplit(path.substr(sizeof(kPrefix) - 1), '/', absl::SkipEmpty());
  const http::verb method = req.method();
  const bool get = method == http::verb::get;
  auto send = [&](http::status s, const json& j) { r->Send(Json(s, j)); };
  auto forbidden = [&] {
    r->Send(Error(http::status::forbidden,
                  "this endpoint needs an admin key; tenant keys may read "
                  "their deployments and their own tenant",
                  "permission_error"));
  };
  auto not_found = [&] {
    r->Send(Error(http::status::not_found,
                  absl::StrCat("unknown control endpoint ",
                               std::string(http::to_string(method)), " ", path,
                               " (see docs/control-api.md)"),
                  "not_found_error"));
  };
  // GET of one deployment or tenant, and its DELETE.
  auto get_one = [&](const json& items, const char* what) {
    if (items.empty()) {
      r->Send(Error(http::status::not_found,
                    absl::StrCat(what, " '", parts[1], "' not found")));
    } else {
      send(http::status::ok, items.at(0));
    }
  };
  auto delete_one = [&](config::Manifest::Kind kind) {
    auto x = controller_->Delete(kind, parts[1]);
    if (!x.ok()) {
      r->Send(Error(x.status()));
    } else {
      send(http::status::ok,
           json{{"kind", x->kind}, {"name", x->name}, {"action", x->action}});
    }
  };
  const std::string a = parts.size() > 0 ? parts[0] : "";
  const std::string b = parts.size() > 1 ? parts[1] : "";
  const std::string c = parts.size() > 2 ? parts[2] : "";

  // Tenant keys: read-only views of their own things.
  if (!key->admin) {
    if (get && a == "deployments" && parts.size() <= 2) {
      const std::vector<std::string> mine =
          controller_->TenantModels(key->tenant);
      if (!b.empty()) {
        if (std::find(mine.begin(), mine.end(), b) == mine.end()) {
          r->Send(Error(http::status::not_found,
                        absl::StrCat("deployment '", b,
                                     "' not found among your models")));
          return true;
        }
        send(http::status::ok, controller_->DeploymentsJson(b).at(0));
        return true;
      }
      json items = json::array();
      for (const std::string& m : mine) {
        for (json& d : controller_->DeploymentsJson(m)) items.push_back(d);
      }
      send(http::status::ok, json{{"items", items}});
      return true;
    }
    if (get && a == "tenants" && b == key->tenant && parts.size() == 2) {
      send(http::status::ok, controller_->TenantsJson(b).at(0));
      return true;
    }
    forbidden();
    return true;
  }

  if (a == "apply" || a == "delete") {
    if (method != http::verb::post || parts.size() != 1) {
      not_found();
      return true;
    }
    auto manifests = config::ParseManifests(req.body(), "request body");
    if (!manifests.ok()) {
      r->Send(Error(manifests.status()));
      return true;
    }
    if (manifests->empty()) {
      r->Send(Error(http::status::unprocessable_entity,
                    "the body holds no manifest (expected YAML or JSON "
                    "documents with kind Deployment or Tenant)"));
      return true;
    }
    json items = json::array();
    if (a == "apply") {
      auto results = controller_->Apply(*manifests);
      if (!results.ok()) {
        r->Send(Error(results.status()));
        return true;
      }
      for (const ApplyResult& x : *results) {
        items.push_back(
            {{"kind", x.kind}, {"name", x.name}, {"action", x.action}});
      }
    } else {
      std::vector<std::string> missing;
      for (const config::Manifest& m : *manifests) {
        const bool tenant = m.kind == config::Manifest::Kind::kTenant;
        if (tenant ? !controller_->HasTenant(m.name())
                   : !controller_->HasDeployment(m.name())) {
          missing.push_back(
              absl::StrCat(tenant ? "tenant/" : "deployment/", m.name()));
        }
      }
      if (!missing.empty()) {
        r->Send(Error(http::status::not_found,
                      absl::StrCat("not found: ", absl::StrJoin(missing, ", "),
                                   "; nothing was deleted")));
        return true;
      }
      for (const config::Manifest& m : *manifests) {
        auto x = controller_->Delete(m.kind, m.name());
        if (!x.ok()) {
          r->Send(Error(x.status()));
          return true;
        }
        items.push_back(
            {{"kind", x->kind}, {"name", x->name}, {"action", x->action}});
      }
    }
    send(http::status::ok, json{{"items", items}});
    return true;
  }

  if (a == "deployments") {
    if (parts.size() == 1 && get) {
      send(http::status::ok, json{{"items", controller_->DeploymentsJson()}});
      return true;
    }
    if (parts.size() == 2 && get) {
      get_one(controller_->DeploymentsJson(b), "deployment");
      return true;
    }
    if (parts.size() == 2 && method == http::verb::delete_) {
      delete_one(config::Manifest::Kind::kDeployment);
      return true;
    }
    if (parts.size() == 3 && c == "scale" && method == http::verb::post) {
      json body = json::parse(req.body(), nullptr, false);
      if (!body.is_object() || !body.contains("replicas") ||
          !body["replicas"].is_number_integer()) {
        r->Send(Error(http::status::bad_request,
                      "the body must be {\"replicas\": N}"));
        return true;
      }
      const int64_t n = body["replicas"].get<int64_t>();
      absl::Status st = controller_->Scale(
          b, static_cast<int>(std::clamp<int64_t>(n, -1, 1 << 20)));
      if (!st.ok()) {
        r->Send(Error(st));
      } else {
        send(http::status::ok, json{{"name", b}, {"replicas", n}});
      }
      return true;
    }
    if (parts.size() == 3 && c == "logs" && get) {
      int tail = 100;
      const std::string t = Query(full, "tail");
      if (!t.empty() && (!absl::SimpleAtoi(t, &tail) || tail < 1)) {
        r->Send(Error(http::status::bad_request,
                      "tail must be a positive integer"));
        return true;
      }
      std::string stream = Query(full, "stream");
      if (stream.empty()) stream = "stderr";
      auto text = controller_->Logs(b, Query(full, "replica"), stream, tail);
      if (!text.ok()) {
        r->Send(Error(text.status().code() == absl::StatusCode::kInvalidArgument
                          ? http::status::bad_request
                          : StatusOf(text.status()),
                      std::string(text.status().message())));
        return true;
      }
      net::HttpResponse res{http::status::ok, 11};
      res.set(http::field::content_type, "text/plain; charset=utf-8");
      res.body() = *text;
      r->Send(std::move(res));
      return true;
    }
    not_found();
    return true;
  }

  if (get && parts.size() == 1) {
    if (a == "replicas") {
      send(http::status::ok, json{{"items", controller_->ReplicasJson()}});
      return true;
    }
    if (a == "gpus") {
      send(http::status::ok, json{{"items", controller_->GpusJson()}});
      return true;
    }
    if (a == "nodes") {
      send(http::status::ok, json{{"items", controller_->NodesJson()}});
      return true;
    }
    if (a == "queues") {
      send(http::status::ok, json{{"items", controller_->QueuesJson()}});
      return true;
    }
    if (a == "tenants") {
      send(http::status::ok, json{{"items", controller_->TenantsJson()}});
      return true;
    }
    if (a == "stats" && stats_ != nullptr) {
      send(http::status::ok, stats_->Json());
      return true;
    }
    if (a == "events") {
      runtime::EventFilter f;
      f.deployment = Query(full, "deployment");
      f.tenant = Query(full, "tenant");
      f.kinds = QueryAll(full, "kind");
      const std::string since = Query(full, "since");
      const std::string limit = Query(full, "limit");
      if ((!since.empty() && !absl::SimpleAtoi(since, &f.since)) ||
          (!limit.empty() && !absl::SimpleAtoi(limit, &f.limit))) {
        r->Send(Error(http::status::bad_request,
                      "since and limit must be integers (since: "
                      "microseconds since the epoch)"));
        return true;
      }
      auto events = controller_->Events(f);
      if (!events.ok()) {
        r->Send(Error(events.status()));
        return true;
      }
      json items = json::array();
      for (const runtime::Event& e : *events) items.push_back(EventJson(e));
      send(http::status::ok, json{{"items", items}});
      return true;
    }
  }

  if (a == "tenants" && parts.size() >= 2) {
    if (parts.size() == 2 && get) {
      get_one(controller_->TenantsJson(b), "tenant");
      return true;
    }
    if (parts.size() == 2 && method == http::verb::delete_) {
      delete_one(config::Manifest::Kind::kTenant);
      return true;
    }
    if (parts.size() == 3 && c == "keys") {
      if (!controller_->HasTenant(b)) {
        r->Send(Error(http::status::not_found,
                      absl::StrCat("tenant '", b, "' not found")));
        return true;
      }
      if (get) {
        auto keys = controller_->ListKeys(b);
        if (!keys.ok()) {
          r->Send(Error(keys.status()));
          return true;
        }
        json items = json::array();
        for (const runtime::KeyInfo& k : *keys) items.push_back(KeyJson(k));
        send(http::status::ok, json{{"items", items}});
        return true;
      }
      if (method == http::verb::post) {
        json body =
            json::parse(req.body().empty() ? "{}" : req.body(), nullptr, false);
        std::string name = "api";
        if (body.is_object() && body.contains("name") &&
            body["name"].is_string()) {
          name = body["name"].get<std::string>();
        }
        auto k = controller_->CreateKey(b, name, false);
        if (!k.ok()) {
          r->Send(Error(k.status()));
          return true;
        }
        send(http::status::created,
             json{{"id", k->key_id}, {"secret", k->secret}, {"tenant", b}});
        return true;
      }
    }
  }

  if (a == "keys") {
    if (parts.size() == 1 && method == http::verb::post) {
      json body =
          json::parse(req.body().empty() ? "{}" : req.body(), nullptr, false);
      std::string name = "admin";
      if (body.is_object() && body.contains("name") &&
          body["name"].is_string()) {
        name = body["name"].get<std::string>();
      }
      auto k = controller_->CreateKey("", name, true);
      if (!k.ok()) {
        r->Send(Error(k.status()));
        return true;
      }
      send(http::status::created,
           json{{"id", k->key_id}, {"secret", k->secret}, {"admin", true}});
      return true;
    }
    if (parts.size() == 1 && get) {
      auto keys = controller_->ListKeys("");
      if (!keys.ok()) {
        r->Send(Error(keys.status()));
        return true;
      }
      json items = json::array();
      for (const runtime::KeyInfo& k : *keys) items.push_back(KeyJson(k));
      send(http::status::ok, json{{"items", items}});
      return true;
    }
    if (parts.size() == 2 && method == http::verb::delete_) {
      absl::Status st = controller_->RevokeKey(b);
      if (!st.ok()) {
        r->Send(Error(st));
      } else {
        send(http::status::ok, json{{"id", b}, {"action", "revoked"}});
      }
      return true;
    }
  }
  not_found();
  return true;
}

}  // namespace gpusched::api
