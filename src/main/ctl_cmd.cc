#include "main/ctl_cmd.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/asio.hpp"
#include "main/table.h"
#include "net/upstream.h"
#include "nlohmann/json.hpp"

namespace gpusched {
namespace {

namespace http = boost::beast::http;
using Json = nlohmann::ordered_json;
using Rows = std::vector<std::vector<std::string>>;

// ---- JSON access that never throws (the server's answers are input).

const Json* Find(const Json& j, std::initializer_list<const char*> path) {
  const Json* at = &j;
  for (const char* key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

std::string Dump(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

std::string Text(const Json* v, const std::string& none = "") {
  if (v == nullptr || v->is_null()) return none;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number_float()) return absl::StrCat(v->get<double>());
  return Dump(*v);
}

std::string Text(const Json& j, std::initializer_list<const char*> path,
                 const std::string& none = "") {
  return Text(Find(j, path), none);
}

// Text, with "-" for a missing or empty value (a table cell).
std::string Cell(const Json& j, std::initializer_list<const char*> path) {
  std::string s = Text(j, path);
  return s.empty() ? "-" : s;
}

double Number(const Json& j, std::initializer_list<const char*> path) {
  const Json* v = Find(j, path);
  return v != nullptr && v->is_number() ? v->get<double>() : 0;
}

const Json& Array(const Json& j, std::initializer_list<const char*> path) {
  static const Json* const kEmpty = new Json(Json::array());
  const Json* v = Find(j, path);
  return v != nullptr && v->is_array() ? *v : *kEmpty;
}

// {"a": 1, "b": "x"} as "a=1 b=x"; "-" when empty.
std::string KeyValues(const Json* obj) {
  if (obj == nullptr || !obj->is_object() || obj->empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [k, v] : obj->items()) {
    parts.push_back(absl::StrCat(k, "=", Text(&v)));
  }
  return absl::StrJoin(parts, " ");
}

// ---- Formatting.

std::string Lower(std::string s) {
  absl::AsciiStrToLower(&s);
  return s;
}

std::string Indent(const std::string& text) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "  ", absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  return out;
}

// 10240 -> "10Gi", 81559 -> "79.6Gi", 512 -> "512Mi".
std::string FormatMiB(double mib) {
  if (mib < 1024) return absl::StrCat(mib, "Mi");
  std::string s = absl::StrFormat("%.1f", mib / 1024);
  if (absl::EndsWith(s, ".0")) s.resize(s.size() - 2);
  return s + "Gi";
}

std::optional<absl::Time> ParseRfc3339(const std::string& s) {
  absl::Time t;
  std::string why;
  if (s.empty() || !absl::ParseTime(absl::RFC3339_full, s, &t, &why)) {
    return std::nullopt;
  }
  return t;
}

// Kubernetes-style: 45s, 12m, 5h, 3d.
std::string FormatAge(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  if (d < absl::Minutes(2)) return absl::StrCat(absl::ToInt64Seconds(d), "s");
  if (d < absl::Hours(2)) return absl::StrCat(absl::ToInt64Minutes(d), "m");
  if (d < absl::Hours(48)) return absl::StrCat(absl::ToInt64Hours(d), "h");
  return absl::StrCat(absl::ToInt64Hours(d) / 24, "d");
}

std::string Age(const Json& j, std::initializer_list<const char*> path,
                absl::Time now) {
  const std::optional<absl::Time> t = ParseRfc3339(Text(j, path));
  return t ? FormatAge(now - *t) : "-";
}

std::string EventTime(const Json& e) {
  std::optional<absl::Time> t;
  if (const Json* us = Find(e, {"timeMicros"}); us && us->is_number()) {
    t = absl::FromUnixMicros(us->get<int64_t>());
  } else {
    t = ParseRfc3339(Text(e, {"time"}));
  }
  if (!t) return Cell(e, {"time"});
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", *t, absl::UTCTimeZone());
}

std::string Resources(const Json& d) {
  if (!Array(d, {"spec", "endpoints"}).empty()) {
    return absl::StrCat("external (", Array(d, {"spec", "endpoints"}).size(),
                        ")");
  }
  const Json* r = Find(d, {"spec", "resources"});
  if (r == nullptr) return "-";
  if (const double whole = Number(*r, {"whole"}); whole > 0) {
    return absl::StrCat(whole, whole == 1 ? " GPU" : " GPUs");
  }
  if (const double milli = Number(*r, {"fraction", "milli"}); milli > 0) {
    const std::string memory = Text(*r, {"fraction", "memory"});
    return absl::StrCat(milli, "m GPU", memory.empty() ? "" : ", ", memory);
  }
  if (const std::string mig = Text(*r, {"mig"}); !mig.empty()) {
    return "MIG " + mig;
  }
  return "none";
}

std::string Replicas(const Json& d) {
  const std::string n = Cell(d, {"spec", "replicas"});
  const std::string lo = Text(d, {"spec", "minReplicas"});
  const std::string hi = Text(d, {"spec", "maxReplicas"});
  if (lo.empty() || lo == hi) return n;
  return absl::StrCat(n, " (", lo, "-", hi, ")");
}

std::string Engine(const Json& d) {
  const Json* e = Find(d, {"spec", "engine"});
  if (e != nullptr && e->is_object()) return Cell(*e, {"template"});
  return Text(e, "-");
}

// "0,1" for whole GPUs, "0(250m)" for a share.
std::string ReplicaGpus(const Json& r) {
  std::vector<std::string> parts;
  for (const Json& s : Array(r, {"gpuShare"})) {
    const double milli = Number(s, {"milli"});
    parts.push_back(absl::StrCat(
        Text(s, {"gpu"}),
        milli > 0 && milli < 1000 ? absl::StrCat("(", milli, "m)") : ""));
  }
  if (parts.empty()) {
    for (const Json& g : Array(r, {"gpus"})) parts.push_back(Text(&g));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ",");
}

// ---- Tables, one per kind.

Rows DeploymentRows(const Json& items, absl::Time now) {
  Rows rows = {
      {"NAME", "REPLICAS", "READY", "ENGINE", "MODEL", "RESOURCES", "AGE"}};
  for (const Json& d : items) {
    const std::string ready = absl::StrCat(
        Text(d, {"status", "readyReplicas"}, "0"), "/",
        Text(d, {"status", "replicas"}, Text(d, {"spec", "replicas"}, "0")));
    rows.push_back({Text(d, {"metadata", "name"}), Replicas(d), ready,
                    Engine(d), Cell(d, {"spec", "model"}), Resources(d),
                    Age(d, {"metadata", "created"}, now)});
  }
  return rows;
}

Rows ReplicaRows(const Json& items, absl::Time) {
  Rows rows = {{"NAME", "DEPLOYMENT", "STATE", "ENDPOINT", "GPUS", "RESTARTS"}};
  for (const Json& r : items) {
    rows.push_back({Text(r, {"name"}), Text(r, {"deployment"}),
                    Text(r, {"state"}), Cell(r, {"endpoint"}), ReplicaGpus(r),
                    Text(r, {"restarts"}, "0")});
  }
  return rows;
}

Rows TenantRows(const Json& items, absl::Time) {
  Rows rows = {{"NAME", "MODELS", "WEIGHT", "PRIORITY"}};
  for (const Json& t : items) {
    std::vector<std::string> models;
    for (const Json& m : Array(t, {"spec", "models"})) {
      models.push_back(Text(&m));
    }
    rows.push_back({Text(t, {"metadata", "name"}),
                    models.empty() ? "*" : absl::StrJoin(models, ","),
                    Cell(t, {"spec", "weight"}),
                    Cell(t, {"spec", "priorityClass"})});
  }
  return rows;
}

Rows GpuRows(const Json& items, absl::Time) {
  Rows rows = {{"NODE", "INDEX", "MODEL", "MEMORY", "ALLOCATED", "REPLICAS"}};
  for (const Json& g : items) {
    const double milli = Number(g, {"allocatedMilli"});
    const double mib = Number(g, {"allocatedMemoryMiB"});
    std::vector<std::string> replicas;
    for (const Json& r : Array(g, {"replicas"})) {
      replicas.push_back(Text(r, {"name"}));
    }
    std::string model = Cell(g, {"model"});
    if (const Json* h = Find(g, {"healthy"}); h && h->is_boolean() && !*h) {
      model += " (unhealthy)";
    }
    rows.push_back({Text(g, {"node"}), Text(g, {"index"}), model,
                    FormatMiB(Number(g, {"memoryMiB"})),
                    milli == 0 && mib == 0
                        ? "-"
                        : absl::StrCat(milli, "m ", FormatMiB(mib)),
                    replicas.empty() ? "-" : absl::StrJoin(replicas, ",")});
  }
  return rows;
}

Rows NodeRows(const Json& items, absl::Time) {
  Rows rows = {{"NAME", "GPUS", "GPU-MODEL", "CPU", "MEMORY", "GPU-ALLOCATED",
                "SIMULATED"}};
  for (const Json& n : items) {
    rows.push_back({Text(n, {"name"}), Text(n, {"gpus"}, "0"),
                    Cell(n, {"gpuModel"}),
                    absl::StrCat(Number(n, {"cpuMilli"}) / 1000),
                    FormatMiB(Number(n, {"memoryMiB"})),
                    absl::StrCat(Number(n, {"allocatedGpuMilli"}), "m"),
                    Text(n, {"simulated"}, "false")});
  }
  return rows;
}

Rows QueueRows(const Json& items, absl::Time) {
  Rows rows = {{"DEPLOYMENT", "QUEUED", "IN-FLIGHT", "READY-REPLICAS"}};
  for (const Json& q : items) {
    rows.push_back({Text(q, {"deployment"}), Text(q, {"queued"}, "0"),
                    Text(q, {"in_flight"}, "0"),
                    Text(q, {"replicas_ready"}, "0")});
  }
  return rows;
}

// The server lists newest first; a terminal reads oldest first.
Rows EventRows(const Json& items, absl::Time) {
  Rows rows = {{"TIME", "KIND", "DEPLOYMENT", "MESSAGE"}};
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    rows.push_back({EventTime(*it), Text(*it, {"kind"}),
                    Cell(*it, {"deployment"}), Text(*it, {"message"})});
  }
  return rows;
}

struct KindInfo {
  const char* plural;    // also the path under /api/v1
  const char* singular;  // in messages and "kind/name"
  bool get_one;          // has GET /api/v1/{plural}/{name}
  // Without get_one: NAME is this query parameter, or else filters the list
  // on `field`.
  const char* query;
  const char* field;
  Rows (*rows)(const Json& items, absl::Time now);
};

constexpr KindInfo kKinds[] = {
    {"deployments", "deployment", true, nullptr, nullptr, DeploymentRows},
    {"replicas", "replica", false, nullptr, "name", ReplicaRows},
    {"tenants", "tenant", true, nullptr, nullptr, TenantRows},
    {"gpus", "gpu", false, nullptr, "node", GpuRows},
    {"nodes", "node", false, nullptr, "name", NodeRows},
    {"queues", "queue", false, nullptr, "deployment", QueueRows},
    {"events", "event", false, "deployment", nullptr, EventRows},
};

const KindInfo* FindKind(const std::string& name) {
  const std::string n = Lower(name);
  for (const KindInfo& k : kKinds) {
    if (n == k.plural || n == k.singular) return &k;
  }
  return nullptr;
}

std::string KnownKinds() {
  std::vector<std::string> names;
  for (const KindInfo& k : kKinds) names.push_back(k.plural);
  return absl::StrJoin(names, ", ");
}

// ---- HTTP.

std::string Escape(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

// "?a=1&b=x" from the pairs whose value is not empty.
std::string Query(
    const std::vector<std::pair<std::string, std::string>>& params) {
  std::string q;
  for (const auto& [k, v] : params) {
    if (v.empty()) continue;
    absl::StrAppend(&q, q.empty() ? "?" : "&", k, "=", Escape(v));
  }
  return q;
}

struct ServerAddress {
  net::Endpoint endpoint;
  std::string prefix;  // path before /api/v1, without a trailing '/'
};

// http://HOST[:PORT][/PREFIX] (or without "http://"); a host name is
// resolved here (UpstreamClient takes addresses), IPv4 first.
absl::StatusOr<ServerAddress> ResolveServer(const std::string& url) {
  absl::string_view rest = url;
  if (absl::StartsWith(rest, "https://")) {
    return absl::InvalidArgumentError("https is not supported yet");
  }
  absl::ConsumePrefix(&rest, "http://");
  if (absl::StrContains(rest, "://")) {
    return absl::InvalidArgumentError("only http:// URLs are supported");
  }
  ServerAddress a;
  const size_t slash = rest.find('/');
  absl::string_view hostport = rest.substr(0, slash);
  if (slash != absl::string_view::npos) {
    a.prefix = std::string(absl::StripSuffix(rest.substr(slash), "/"));
  }
  absl::string_view host = hostport;
  absl::string_view port = "80";
  if (absl::ConsumePrefix(&host, "[")) {  // [::1]:8080
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError("unclosed '[' in the host");
    }
    absl::string_view after = host.substr(close + 1);
    host = host.substr(0, close);
    if (absl::ConsumePrefix(&after, ":")) port = after;
  } else if (const size_t colon = hostport.rfind(':');
             colon != absl::string_view::npos) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  int port_number = 0;
  if (host.empty()) return absl::InvalidArgumentError("no host");
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 1 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad port '", port, "'"));
  }
  a.endpoint.port = static_cast<uint16_t>(port_number);
  boost::system::error_code ec;
  boost::asio::ip::make_address(std::string(host), ec);
  if (!ec) {
    a.endpoint.host = std::string(host);
    return a;
  }
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::resolver resolver(ioc);
  const auto found = resolver.resolve(std::string(host), "", ec);
  if (ec || found.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", ec.message()));
  }
  auto pick = found.begin();
  for (auto it = found.begin(); it != found.end(); ++it) {
    if (it->endpoint().address().is_v4()) {
      pick = it;
      break;
    }
  }
  a.endpoint.host = pick->endpoint().address().to_string();
  return a;
}

struct Answer {
  absl::Status transport;  // not OK: no answer came
  unsigned status = 0;
  std::string body;
  bool ok() const { return transport.ok() && status / 100 == 2; }
};

Answer NoAnswer(absl::Status why) {
  Answer a;
  a.transport = std::move(why);
  return a;
}

net::UpstreamOptions UpstreamOptionsFor(const CtlOptions& o) {
  net::UpstreamOptions u;
  u.connect_timeout = o.connect_timeout;
  u.first_byte_timeout = o.timeout;
  u.idle_timeout = o.timeout;
  return u;
}

// One command's connection to the server.
class Client {
 public:
  explicit Client(const CtlOptions& o)
      : o_(o), upstream_(UpstreamOptionsFor(o)) {}

  Answer Call(http::verb verb, const std::string& target, std::string body = "",
              const char* content_type = nullptr) {
    if (!address_) address_ = ResolveServer(o_.server);
    if (!address_->ok()) return NoAnswer(address_->status());
    http::request<http::string_body> req{verb, (*address_)->prefix + target,
                                         11};
    req.set(http::field::accept, "application/json");
    req.set(http::field::user_agent, "gpusched-cli");
    if (!o_.key.empty()) {
      req.set(http::field::authorization, "Bearer " + o_.key);
    }
    if (content_type != nullptr) {
      req.set(http::field::content_type, content_type);
    }
    req.body() = std::move(body);
    absl::StatusOr<net::UpstreamClient::Result> r =
        upstream_.Fetch((*address_)->endpoint, std::move(req));
    if (!r.ok()) return NoAnswer(r.status());
    Answer a;
    a.status = r->status;
    a.body = std::move(r->body);
    return a;
  }

 private:
  const CtlOptions& o_;
  net::UpstreamClient upstream_;
  std::optional<absl::StatusOr<ServerAddress>> address_;
};

// The server's error message (its JSON error body, else the status).
std::string ErrorMessage(const Answer& a, std::vector<std::string>* problems) {
  const Json j = Json::parse(a.body, nullptr, false);
  if (!j.is_discarded()) {
    for (const Json& p : Array(j, {"error", "problems"})) {
      problems->push_back(Text(&p));
    }
    if (std::string m = Text(j, {"error", "message"}); !m.empty()) return m;
    if (const Json* e = Find(j, {"error"}); e && e->is_string()) {
      return Text(e);
    }
  }
  std::string first_line(absl::StripAsciiWhitespace(
      absl::string_view(a.body).substr(0, a.body.find('\n'))));
  return absl::StrCat("HTTP ", a.status,
                      first_line.empty() ? "" : ": " + first_line);
}

// Prints why `a` failed; returns the exit status.
int Fail(const Answer& a, const CtlOptions& o, std::ostream& err) {
  if (absl::IsInvalidArgument(a.transport)) {
    err << "error: --server " << o.server << ": " << a.transport.message()
        << "\n";
    return kExitUsage;
  }
  if (!a.transport.ok()) {
    // UpstreamClient names the endpoint again: "upstream H:P: cannot ...".
    absl::string_view why = a.transport.message();
    if (absl::ConsumePrefix(&why, "upstream ") && why.find(": ") != why.npos) {
      why.remove_prefix(why.find(": ") + 2);
    }
    err << "cannot reach gpusched at " << o.server << ": " << why << "\n";
    return kExitUsage;
  }
  std::vector<std::string> problems;
  err << "error: " << ErrorMessage(a, &problems) << "\n";
  for (const std::string& p : problems) err << "  " << p << "\n";
  return kExitServerError;
}

// The JSON of a successful answer, else prints why not and returns the exit
// status.
int Expect(const Answer& a, const CtlOptions& o, std::ostream& err, Json* j) {
  if (!a.ok()) return Fail(a, o, err);
  *j = Json::parse(a.body, nullptr, false);
  if (j->is_discarded()) {
    err << "error: the answer from " << o.server << " is not JSON\n";
    return kExitServerError;
  }
  return kExitOk;
}

int GetJson(Client& c, const CtlOptions& o, const std::string& target,
            std::ostream& err, Json* j) {
  return Expect(c.Call(http::verb::get, target), o, err, j);
}

int ReadInput(const std::string& file, std::istream& in, std::ostream& err,
              std::string* text) {
  std::ostringstream buf;
  if (file == "-") {
    buf << in.rdbuf();
  } else {
    std::ifstream f(file, std::ios::binary);
    if (!f) {
      err << "error: cannot read " << file << "\n";
      return kExitUsage;
    }
    buf << f.rdbuf();
  }
  *text = buf.str();
  return kExitOk;
}

// "deployment/chat created" per item of {"items": [{kind, name, action}]}
// (or for the one object answered).
void PrintActions(const Json& j, std::ostream& out) {
  const Json* items = Find(j, {"items"});
  for (const Json& item : items ? Array(j, {"items"}) : Json::array({j})) {
    out << Lower(Text(item, {"kind"})) << "/" << Text(item, {"name"}) << " "
        << Text(item, {"action"}) << "\n";
  }
}

// POSTs a manifest file to `target` and prints what was done to each.
int PostManifests(const CtlOptions& o, const std::string& target,
                  const std::string& file, std::istream& in, std::ostream& out,
                  std::ostream& err) {
  std::string text;
  if (int rc = ReadInput(file, in, err, &text); rc != kExitOk) return rc;
  Client c(o);
  Json j;
  if (int rc = Expect(
          c.Call(http::verb::post, target, std::move(text), "application/yaml"),
          o, err, &j);
      rc != kExitOk) {
    return rc;
  }
  PrintActions(j, out);
  return kExitOk;
}

// Prints a list answer as a table or as JSON.
void PrintList(const KindInfo& k, const Json& j, const std::string& output,
               const CtlOptions& o, std::ostream& out, std::ostream& err) {
  if (output == "json") {
    out << Dump(j, 2) << "\n";
    return;
  }
  const Json& items = Array(j, {"items"});
  if (items.empty()) {
    err << "No " << k.plural << ".\n";
    return;
  }
  out << FormatTable(k.rows(items, o.now));
}

int CheckOutput(const std::string& output, std::ostream& err) {
  if (output == "table" || output == "json") return kExitOk;
  err << "error: -o " << output << ": want table or json\n";
  return kExitUsage;
}

// deployment | tenant (plural too), else prints why not.
const KindInfo* ObjectKind(const std::string& kind, std::ostream& err) {
  const KindInfo* k = FindKind(kind);
  if (k == nullptr || !k->get_one) {
    err << "error: unknown kind '" << kind << "': want deployment or tenant\n";
    return nullptr;
  }
  return k;
}

// `verb` on /api/v1/{kind}/{name} for KIND deployment | tenant (`*k`).
int CallObject(Client& c, const CtlOptions& o, http::verb verb,
               const std::string& kind, const std::string& name,
               std::ostream& err, const KindInfo** k, Json* j) {
  *k = ObjectKind(kind, err);
  if (*k == nullptr) return kExitUsage;
  return Expect(
      c.Call(verb, absl::StrCat("/api/v1/", (*k)->plural, "/", Escape(name))),
      o, err, j);
}

// ---- describe.

void DescribeEvents(const Answer& a, std::ostream& out) {
  const Json j = a.ok() ? Json::parse(a.body, nullptr, false) : Json();
  if (!a.ok() || j.is_discarded()) {
    std::vector<std::string> problems;
    out << "Events: (unavailable: "
        << (a.transport.ok() ? ErrorMessage(a, &problems)
                             : std::string(a.transport.message()))
        << ")\n";
    return;
  }
  const Json& items = Array(j, {"items"});
  if (items.empty()) {
    out << "Events: <none>\n";
    return;
  }
  Rows rows = EventRows(items, absl::Time());
  for (auto& row : rows) row.erase(row.begin() + 2);  // the object's own
  out << "Events:\n" << Indent(FormatTable(rows));
}

std::string Labels(const Json& obj) {
  return KeyValues(Find(obj, {"metadata", "labels"}));
}

std::string Created(const Json& obj, absl::Time now) {
  const std::string created = Cell(obj, {"metadata", "created"});
  const std::string age = Age(obj, {"metadata", "created"}, now);
  return age == "-" ? created : absl::StrCat(created, " (", age, " ago)");
}

void DescribeDeployment(const Json& d, absl::Time now, std::ostream& out) {
  std::vector<std::string> args;
  for (const Json& a : Array(d, {"spec", "engine", "args"})) {
    args.push_back(Text(&a));
  }
  std::vector<std::string> endpoints;
  for (const Json& e : Array(d, {"spec", "endpoints"})) {
    endpoints.push_back(Text(&e));
  }
  Rows fields = {
      {"Name:", Text(d, {"metadata", "name"})},
      {"Labels:", Labels(d)},
      {"Created:", Created(d, now)},
      {"Generation:", Cell(d, {"metadata", "generation"})},
      {"Model:", Cell(d, {"spec", "model"})},
      {"Engine:", absl::StrCat(Engine(d), args.empty() ? "" : " ",
                               absl::StrJoin(args, " "))},
      {"Resources:", Resources(d)},
      {"Priority:", Cell(d, {"spec", "priorityClass"})},
      {"Replicas:",
       absl::StrCat(Replicas(d), " desired, ",
                    Text(d, {"status", "replicas"}, "0"), " running, ",
                    Text(d, {"status", "readyReplicas"}, "0"), " ready")},
      {"Requests:",
       absl::StrCat(Text(d, {"status", "queued"}, "0"), " queued, ",
                    Text(d, {"status", "inFlight"}, "0"), " in flight")},
  };
  if (!endpoints.empty()) {
    fields.push_back({"Endpoints:", absl::StrJoin(endpoints, " ")});
  }
  if (std::string m = Text(d, {"status", "message"}); !m.empty()) {
    fields.push_back({"Message:", m});
  }
  out << FormatTable(fields);
  const Json& replicas = Array(d, {"status", "replicaStatus"});
  if (replicas.empty()) {
    out << "Replica list: <none>\n";
  } else {
    Rows rows = {{"NAME", "STATE", "ENDPOINT", "NODE", "GPUS", "RESTARTS",
                  "STARTED", "MESSAGE"}};
    for (const Json& r : replicas) {
      rows.push_back({Text(r, {"name"}), Text(r, {"state"}),
                      Cell(r, {"endpoint"}), Cell(r, {"node"}), ReplicaGpus(r),
                      Text(r, {"restarts"}, "0"), Age(r, {"startedAt"}, now),
                      Text(r, {"message"})});
    }
    out << "Replica list:\n" << Indent(FormatTable(rows));
  }
}

void DescribeTenant(const Json& t, absl::Time now, std::ostream& out) {
  std::vector<std::string> models;
  for (const Json& m : Array(t, {"spec", "models"})) models.push_back(Text(&m));
  Rows fields = {
      {"Name:", Text(t, {"metadata", "name"})},
      {"Labels:", Labels(t)},
      {"Created:", Created(t, now)},
      {"Models:", models.empty() ? "* (all)" : absl::StrJoin(models, ", ")},
      {"Weight:", Cell(t, {"spec", "weight"})},
      {"Priority:", Cell(t, {"spec", "priorityClass"})},
      {"Limits:", KeyValues(Find(t, {"spec", "limits"}))},
      {"Quota:", KeyValues(Find(t, {"spec", "quota"}))},
  };
  if (const Json* s = Find(t, {"status"}); s && s->is_object()) {
    for (const auto& [k, v] : s->items()) {
      fields.push_back({absl::StrCat("Status ", k, ":"), Text(&v)});
    }
  }
  out << FormatTable(fields);
}

}  // namespace

int RunApply(const CtlOptions& o, const std::string& file, std::istream& in,
             std::ostream& out, std::ostream& err) {
  return PostManifests(o, "/api/v1/apply", file, in, out, err);
}

int RunDeleteFile(const CtlOptions& o, const std::string& file,
                  std::istream& in, std::ostream& out, std::ostream& err) {
  return PostManifests(o, "/api/v1/delete", file, in, out, err);
}

int RunGet(const CtlOptions& o, const std::string& kind,
           const std::string& name, const std::string& output,
           std::ostream& out, std::ostream& err) {
  const KindInfo* k = FindKind(kind);
  if (k == nullptr) {
    err << "error: unknown kind '" << kind << "'; known: " << KnownKinds()
        << "\n";
    return kExitUsage;
  }
  if (int rc = CheckOutput(output, err); rc != kExitOk) return rc;
  std::string target = absl::StrCat("/api/v1/", k->plural);
  if (!name.empty() && k->get_one) {
    absl::StrAppend(&target, "/", Escape(name));
  } else if (!name.empty() && k->query != nullptr) {
    absl::StrAppend(&target, Query({{k->query, name}}));
  }
  Client c(o);
  Json j;
  if (int rc = GetJson(c, o, target, err, &j); rc != kExitOk) return rc;
  if (!name.empty() && k->get_one) {
    if (output == "json") {
      out << Dump(j, 2) << "\n";
      return kExitOk;
    }
    j = Json{{"items", Json::array({j})}};
  } else if (!name.empty() && k->field != nullptr) {
    Json items = Json::array();
    for (const Json& item : Array(j, {"items"})) {
      if (Text(item, {k->field}) == name) items.push_back(item);
    }
    if (items.empty()) {
      err << "error: " << k->singular << " \"" << name << "\" not found\n";
      return kExitServerError;
    }
    j = Json{{"items", std::move(items)}};
  }
  PrintList(*k, j, output, o, out, err);
  return kExitOk;
}

int RunDescribe(const CtlOptions& o, const std::string& kind,
                const std::string& name, std::ostream& out, std::ostream& err) {
  Client c(o);
  const KindInfo* k = nullptr;
  Json j;
  if (int rc = CallObject(c, o, http::verb::get, kind, name, err, &k, &j);
      rc != kExitOk) {
    return rc;
  }
  const bool deployment = std::string(k->singular) == "deployment";
  if (deployment) {
    DescribeDeployment(j, o.now, out);
  } else {
    DescribeTenant(j, o.now, out);
  }
  // A tenant key may read its object but not the events: say so, still 0.
  DescribeEvents(
      c.Call(http::verb::get,
             absl::StrCat("/api/v1/events",
                          Query({{k->singular, name}, {"limit", "10"}}))),
      out);
  return kExitOk;
}

int RunDelete(const CtlOptions& o, const std::string& kind,
              const std::string& name, std::ostream& out, std::ostream& err) {
  Client c(o);
  const KindInfo* k = nullptr;
  Json j;
  if (int rc = CallObject(c, o, http::verb::delete_, kind, name, err, &k, &j);
      rc != kExitOk) {
    return rc;
  }
  if (Find(j, {"name"}) == nullptr) {
    j = Json{{"kind", k->singular}, {"name", name}, {"action", "deleted"}};
  }
  PrintActions(j, out);
  return kExitOk;
}

int RunLogs(const CtlOptions& o, const LogsQuery& q, std::ostream& out,
            std::ostream& err) {
  if (!q.stream.empty() && q.stream != "stdout" && q.stream != "stderr") {
    err << "error: --stream " << q.stream << ": want stdout or stderr\n";
    return kExitUsage;
  }
  if (q.tail < 0) {
    err << "error: --tail " << q.tail << ": want a count >= 0\n";
    return kExitUsage;
  }
  Client c(o);
  const Answer a = c.Call(
      http::verb::get,
      absl::StrCat("/api/v1/deployments/", Escape(q.deployment), "/logs",
                   Query({{"replica", q.replica},
                          {"stream", q.stream},
                          {"tail", q.tail > 0 ? absl::StrCat(q.tail) : ""}})));
  if (!a.ok()) return Fail(a, o, err);
  out << a.body;
  if (!a.body.empty() && a.body.back() != '\n') out << "\n";
  return kExitOk;
}

int RunEvents(const CtlOptions& o, const EventsQuery& q,
              const std::string& output, std::ostream& out, std::ostream& err) {
  if (int rc = CheckOutput(output, err); rc != kExitOk) return rc;
  if (q.limit < 0) {
    err << "error: --limit " << q.limit << ": want a count >= 0\n";
    return kExitUsage;
  }
  std::vector<std::pair<std::string, std::string>> params = {
      {"deployment", q.deployment},
      {"tenant", q.tenant},
      {"limit", q.limit > 0 ? absl::StrCat(q.limit) : ""}};
  for (const std::string& kind : q.kinds) params.push_back({"kind", kind});
  Client c(o);
  Json j;
  if (int rc = GetJson(c, o, "/api/v1/events" + Query(params), err, &j);
      rc != kExitOk) {
    return rc;
  }
  PrintList(*FindKind("events"), j, output, o, out, err);
  return kExitOk;
}

namespace {

struct CommonFlags {
  std::string server = "http://127.0.0.1:8080";
  std::string key;
};

void AddCommonFlags(CLI::App* cmd, CommonFlags* f) {
  cmd->add_option("--server", f->server,
                  "gpusched's URL (default: $GPUSCHED_SERVER, else "
                  "http://127.0.0.1:8080)")
      ->envname("GPUSCHED_SERVER");
  cmd->add_option("--key", f->key, "API key (default: $GPUSCHED_KEY)")
      ->envname("GPUSCHED_KEY");
}

CtlOptions Options(const CommonFlags& f) {
  CtlOptions o;
  o.server = f.server;
  o.key = f.key;
  return o;
}

void Exit(int rc) {
  if (rc != kExitOk) throw CLI::RuntimeError(rc);
}

}  // namespace

void AddCtlCommands(CLI::App& app) {
  struct Flags {
    CommonFlags common;
    std::string file, kind, name, output = "table";
    LogsQuery logs;
    EventsQuery events;
  };
  // One set per subcommand: CLI11 binds options to storage up front.
  auto add = [&app](const std::string& name, const std::string& help) {
    auto flags = std::make_shared<Flags>();
    CLI::App* cmd = app.add_subcommand(name, help);
    AddCommonFlags(cmd, &flags->common);
    return std::make_pair(cmd, flags);
  };

  {
    auto [cmd, f] = add("apply",
                        "Create or update deployments and tenants "
                        "from manifests on a running server");
    cmd->add_option("-f,--filename", f->file, "Manifest file; - for stdin")
        ->required();
    cmd->callback([f = f] {
      Exit(RunApply(Options(f->common), f->file, std::cin, std::cout,
                    std::cerr));
    });
  }
  {
    auto [cmd, f] = add("get", "List objects: " + KnownKinds());
    cmd->add_option("KIND", f->kind, "What to list")->required();
    cmd->add_option("NAME", f->name, "Only this one");
    cmd->add_option("-o,--output", f->output, "table or json")
        ->check(CLI::IsMember({"table", "json"}));
    cmd->callback([f = f] {
      Exit(RunGet(Options(f->common), f->kind, f->name, f->output, std::cout,
                  std::cerr));
    });
  }
  {
    auto [cmd, f] = add("describe",
                        "Show a deployment or a tenant in detail, "
                        "with its last events");
    cmd->add_option("KIND", f->kind, "deployment or tenant")->required();
    cmd->add_option("NAME", f->name, "Its name")->required();
    cmd->callback([f = f] {
      Exit(RunDescribe(Options(f->common), f->kind, f->name, std::cout,
                       std::cerr));
    });
  }
  {
    auto [cmd, f] = add("delete",
                        "Delete a deployment (its replicas are "
                        "drained and stopped) or a tenant");
    cmd->add_option("KIND", f->kind, "deployment or tenant");
    cmd->add_option("NAME", f->name, "Its name");
    cmd->add_option("-f,--filename", f->file,
                    "Delete each object of this manifest file; - for stdin");
    cmd->callback([f = f] {
      const CtlOptions o = Options(f->common);
      if (!f->file.empty() && f->kind.empty()) {
        Exit(RunDeleteFile(o, f->file, std::cin, std::cout, std::cerr));
      } else if (f->file.empty() && !f->name.empty()) {
        Exit(RunDelete(o, f->kind, f->name, std::cout, std::cerr));
      } else {
        std::cerr << "error: delete takes KIND NAME, or -f FILE\n";
        Exit(kExitUsage);
      }
    });
  }
  {
    auto [cmd, f] = add("logs", "Print a deployment's engine log");
    cmd->add_option("DEPLOYMENT", f->logs.deployment, "The deployment")
        ->required();
    cmd->add_option("--replica", f->logs.replica,
                    "Which replica (default: the first)");
    cmd->add_option("--stream", f->logs.stream, "stdout or stderr (default)")
        ->check(CLI::IsMember({"stdout", "stderr"}));
    cmd->add_option("--tail", f->logs.tail, "The last N lines (default 100)")
        ->check(CLI::NonNegativeNumber);
    cmd->callback([f = f] {
      Exit(RunLogs(Options(f->common), f->logs, std::cout, std::cerr));
    });
  }
  {
    auto [cmd, f] = add("events", "Print recent events, oldest first");
    cmd->add_option("--deployment", f->events.deployment, "Of this deployment");
    cmd->add_option("--tenant", f->events.tenant, "Of this tenant");
    cmd->add_option("--kind", f->events.kinds,
                    "Of this kind (e.g. replica.ready); may repeat");
    cmd->add_option("--limit", f->events.limit,
                    "The newest N (default: the server's)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("-o,--output", f->output, "table or json")
        ->check(CLI::IsMember({"table", "json"}));
    cmd->callback([f = f] {
      Exit(RunEvents(Options(f->common), f->events, f->output, std::cout,
                     std::cerr));
    });
  }
}

}  // namespace gpusched
