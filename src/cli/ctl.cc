#include "cli/ctl.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
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
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/asio.hpp"
#include "cli/table.h"
#include "cli/views.h"
#include "net/upstream.h"
#include "nlohmann/json.hpp"

namespace gpusched::cli {
namespace {

namespace http = boost::beast::http;

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

// The server names a posted manifest file "request body" in its problems
// ("request body:6: ..."); the user knows it as `source` (the file's name).
std::string Located(absl::string_view text, absl::string_view source) {
  if (source.empty()) return std::string(text);
  return absl::StrReplaceAll(text, {{"request body", source}});
}

// Prints why `a` failed (locations in `source` when a file was posted);
// returns the exit status.
int Fail(const Answer& a, const CtlOptions& o, std::ostream& err,
         absl::string_view source = "") {
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
    err << "error: cannot reach gpusched at " << o.server << ": " << why << "\n"
        << "hint: start it (`gpusched serve --config FILE`), or point --server "
           "(or $GPUSCHED_SERVER) at a running one\n";
    return kExitUsage;
  }
  std::vector<std::string> problems;
  const std::string message = ErrorMessage(a, &problems);
  err << "error: " << Located(message, source) << "\n";
  for (const std::string& p : problems) {
    if (p != message) err << "  " << Located(p, source) << "\n";
  }
  if (a.status == 401) {
    err << "hint: pass an admin key with --key KEY or $GPUSCHED_KEY (`gpusched "
           "serve` writes one to <key_dir>/admin.key)\n";
  }
  return kExitServerError;
}

// The JSON of a successful answer, else prints why not and returns the exit
// status.
int Expect(const Answer& a, const CtlOptions& o, std::ostream& err, Json* j,
           absl::string_view source = "") {
  if (!a.ok()) return Fail(a, o, err, source);
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
    errno = 0;
    std::ifstream f(file, std::ios::binary);
    if (!f) {
      err << "error: cannot read " << file << ": "
          << (errno != 0 ? std::strerror(errno) : "cannot open it") << "\n";
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
          o, err, &j, file == "-" ? "stdin" : file);
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
    // The server may say why there is nothing (alerts: no Prometheus set).
    const std::string why = Text(j, {"message"});
    err << (why.empty() ? absl::StrCat("No ", k.plural, ".") : why) << "\n";
    return;
  }
  out << FormatTable(k.rows(items, o.now));
  if (const int64_t omitted = static_cast<int64_t>(Number(j, {"omitted"}));
      omitted > 0) {
    err << "(" << omitted << " more not listed)\n";
  }
}

int CheckOutput(const std::string& output, std::ostream& err) {
  if (output == "table" || output == "json") return kExitOk;
  err << "error: -o " << output << ": want table or json\n";
  return kExitUsage;
}

// A kind `apply` takes (deployment | tenant | route, plurals and aliases
// too), else prints why not.
const KindInfo* ObjectKind(const std::string& kind, std::ostream& err) {
  const KindInfo* k = FindKind(kind);
  if (k == nullptr || k->describe == nullptr) {
    err << "error: unknown kind '" << kind << "': want " << ObjectKinds()
        << "\n";
    return nullptr;
  }
  return k;
}

// `verb` on /api/v1/{kind}/{name} for an ObjectKind (`*k`).
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
  k->describe(j, o.now, out);
  // A tenant key may read its object but not the events: say so, still 0.
  DescribeEvents(
      c.Call(http::verb::get,
             absl::StrCat("/api/v1/events",
                          Query({{k->events, name}, {"limit", "10"}}))),
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

int RunRollout(const CtlOptions& o, const std::string& action,
               const std::string& route, const std::string& reason,
               std::ostream& out, std::ostream& err) {
  static const std::vector<std::string> kActions = {
      "status", "promote", "promote-full", "pause", "resume", "abort", "retry"};
  if (std::find(kActions.begin(), kActions.end(), action) == kActions.end()) {
    err << "error: rollout " << action << ": want one of "
        << absl::StrJoin(kActions, ", ") << "\n";
    return kExitUsage;
  }
  Client c(o);
  const std::string path = absl::StrCat("/api/v1/routes/", Escape(route));
  const Answer a =
      action == "status"
          ? c.Call(http::verb::get, path)
          : c.Call(http::verb::post, path + "/rollout",
                   Json{{"action", action}, {"reason", reason}}.dump(),
                   "application/json");
  if (!a.ok()) return Fail(a, o, err);
  const Json j = Json::parse(a.body, nullptr, false);
  if (!j.is_object()) {
    err << "error: the server's answer is not a JSON object\n";
    return kExitServerError;
  }
  DescribeRollout(j, out);
  return kExitOk;
}

int RunLogs(const CtlOptions& o, const LogsQuery& q, std::ostream& out,
            std::ostream& err) {
  if (!q.stream.empty() && q.stream != "stdout" && q.stream != "stderr") {
    err << "error: --stream " << q.stream << ": want stdout or stderr\n";
    return kExitUsage;
  }
  if (q.tail < 0) {
    err << "error: --tail " << q.tail << ": want 1..10000\n";
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
    err << "error: --limit " << q.limit << ": want 1..1000\n";
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

int RunAudit(const CtlOptions& o, const AuditQuery& q,
             const std::string& output, std::ostream& out, std::ostream& err) {
  if (q.limit < 0) {
    err << "error: --limit " << q.limit << ": want a count >= 0\n";
    return kExitUsage;
  }
  const std::vector<std::pair<std::string, std::string>> params = {
      {"since", q.since},
      {"until", q.until},
      {"who", q.who},
      {"resource", q.resource},
      {"verb", q.verb},
      {"outcome", q.outcome},
      {"limit", q.limit > 0 ? absl::StrCat(q.limit) : ""},
      {"order", "asc"}};
  Client c(o);
  Json j;
  if (int rc = GetJson(c, o, "/api/v1/audit" + Query(params), err, &j);
      rc != kExitOk) {
    return rc;
  }
  const Json* items = Find(j, {"items"});
  if (output == "json") {
    out << j.dump(2) << "\n";
    return kExitOk;
  }
  if (output == "jsonl") {
    for (const Json& r : items != nullptr ? *items : Json::array()) {
      Json line = r;
      line.erase("timeIso");
      out << line.dump() << "\n";
    }
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"SEQ", "TIME", "WHO", "ROLE", "VERB", "RESOURCE", "OUTCOME", "PEER"}};
  for (const Json& r : items != nullptr ? *items : Json::array()) {
    rows.push_back({absl::StrCat(r.value("seq", 0)), r.value("timeIso", ""),
                    r.value("who", ""), r.value("role", ""),
                    r.value("verb", ""), r.value("resource", ""),
                    r.value("outcome", ""), r.value("peer", "")});
  }
  out << FormatTable(rows);
  return kExitOk;
}

int RunAuditVerify(const CtlOptions& o, std::ostream& out, std::ostream& err) {
  Client c(o);
  Json j;
  if (int rc = GetJson(c, o, "/api/v1/audit/verify", err, &j); rc != kExitOk) {
    return rc;
  }
  if (j.value("ok", false)) {
    out << "audit log intact: " << j.value("records", 0) << " records, seq "
        << j.value("firstSeq", 0) << ".." << j.value("headSeq", 0)
        << " (anchor " << j.value("anchorSeq", 0) << ")\n";
    return kExitOk;
  }
  err << "audit log TAMPERED: " << j.value("problem", "") << "\n";
  return kExitServerError;
}

namespace {

// Levenshtein distance, for flag suggestions (short strings).
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string FlagSuggestions(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
  std::vector<std::string> known;
  for (const CLI::Option* opt : cmd->get_options()) {
    for (const std::string& n : opt->get_lnames()) known.push_back("--" + n);
  }
  std::string out;
  for (int i = 1; i < argc && argv[i] != nullptr; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::StartsWith(arg, "--")) continue;
    const absl::string_view flag = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), flag) != known.end()) continue;
    std::string best;
    size_t best_distance = 3;  // within 2 edits
    for (const std::string& k : known) {
      const size_t d = EditDistance(flag, k);
      if (d < best_distance) {
        best = k;
        best_distance = d;
      }
    }
    if (!best.empty()) {
      absl::StrAppend(&out, "error: unknown flag ", flag, "; did you mean ",
                      best, "?\n");
    }
  }
  return out;
}

namespace {

struct CommonFlags {
  std::string server = "http://127.0.0.1:8080";
  std::string key;
  std::string token;
};

void AddCommonFlags(CLI::App* cmd, CommonFlags* f) {
  cmd->add_option("--server", f->server,
                  "gpusched's URL (default: $GPUSCHED_SERVER, else "
                  "http://127.0.0.1:8080)")
      ->envname("GPUSCHED_SERVER");
  cmd->add_option("--key", f->key, "API key (default: $GPUSCHED_KEY)")
      ->envname("GPUSCHED_KEY");
  cmd->add_option("--token", f->token,
                  "single sign-on token, used when no key is given "
                  "(default: $GPUSCHED_TOKEN)")
      ->envname("GPUSCHED_TOKEN");
}

CtlOptions Options(const CommonFlags& f) {
  CtlOptions o;
  o.server = f.server;
  o.key = !f.key.empty() ? f.key : f.token;
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
    AuditQuery audit;
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
                        "Create or update the objects of a manifest file "
                        "(kind Deployment, Tenant or ModelRoute) on a running "
                        "server; nothing changes unless all are valid");
    cmd->add_option("-f,--filename", f->file, "Manifest file; - for stdin")
        ->required();
    cmd->callback([f = f] {
      Exit(RunApply(Options(f->common), f->file, std::cin, std::cout,
                    std::cerr));
    });
  }
  {
    auto [cmd, f] = add("get", "List objects of a kind: " + KnownKinds());
    cmd->add_option("KIND", f->kind, "What to list (plural, singular or alias)")
        ->required();
    cmd->add_option("NAME", f->name,
                    "Only this one (gpus: of this node; queues, events: of "
                    "this deployment)");
    cmd->add_option("-o,--output", f->output, "table or json")
        ->check(CLI::IsMember({"table", "json"}));
    cmd->callback([f = f] {
      Exit(RunGet(Options(f->common), f->kind, f->name, f->output, std::cout,
                  std::cerr));
    });
  }
  {
    auto [cmd, f] = add("describe", "Show a " + ObjectKinds() +
                                        " in detail, with its last 10 events");
    cmd->add_option("KIND", f->kind,
                    ObjectKinds() + " (plural or alias too: modelroute)")
        ->required();
    cmd->add_option("NAME", f->name, "Its name")->required();
    cmd->callback([f = f] {
      Exit(RunDescribe(Options(f->common), f->kind, f->name, std::cout,
                       std::cerr));
    });
  }
  {
    auto [cmd, f] = add("delete",
                        "Delete a deployment (its replicas are drained and "
                        "stopped), a tenant (and its keys) or a route (its "
                        "deployments stay), by name or by manifest file");
    cmd->add_option("KIND", f->kind,
                    ObjectKinds() + " (plural or alias too: modelroute)");
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
    auto [cmd, f] =
        add("rollout",
            "Show or steer a ModelRoute's canary rollout. ACTION: status (show "
            "weights, phase, step and analysis); promote (the next step now, "
            "also past a manual step); promote-full (straight to 100%); pause "
            "(hold the weights; a failing analysis still rolls back); resume "
            "(go on "
            "from a pause); abort (the stable takes 100%); retry (start a "
            "rolled back or aborted rollout again from its first step)");
    cmd->add_option("ACTION", f->kind,
                    "status | promote | promote-full | pause | resume | "
                    "abort | retry")
        ->required();
    cmd->add_option("ROUTE", f->name, "The ModelRoute's name")->required();
    cmd->add_option("--reason", f->file,
                    "Why: kept in the action's event and shown in the "
                    "route's status");
    cmd->callback([f = f] {
      Exit(RunRollout(Options(f->common), f->kind, f->name, f->file, std::cout,
                      std::cerr));
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
    cmd->add_option("--tail", f->logs.tail,
                    "The last N lines, 1..10000 (default 100)")
        ->check(CLI::Range(1, 10000));
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
                    "The newest N, 1..1000 (default: the server's, 100)")
        ->check(CLI::Range(1, 1000));
    cmd->add_option("-o,--output", f->output, "table or json")
        ->check(CLI::IsMember({"table", "json"}));
    cmd->callback([f = f] {
      Exit(RunEvents(Options(f->common), f->events, f->output, std::cout,
                     std::cerr));
    });
  }
  {
    auto [cmd, f] = add("audit",
                        "Print the audit log of control actions, oldest "
                        "first; `audit verify` checks its hash chain");
    cmd->add_option("--since", f->audit.since,
                    "From this time (RFC 3339 or unix seconds)");
    cmd->add_option("--until", f->audit.until, "Before this time");
    cmd->add_option("--who", f->audit.who, "Of this key id or token subject");
    cmd->add_option("--resource", f->audit.resource,
                    "Of this object (deployment/chat) or kind (deployment)");
    cmd->add_option("--verb", f->audit.verb, "apply, delete, scale, ...");
    cmd->add_option("--outcome", f->audit.outcome, "ok, denied or error")
        ->check(CLI::IsMember({"ok", "denied", "error"}));
    cmd->add_option("--limit", f->audit.limit,
                    "At most N, at most 10000 (default: the server's, 100)")
        ->check(CLI::Range(0, 10000));
    cmd->add_option("-o,--output", f->output, "table, json or jsonl")
        ->check(CLI::IsMember({"table", "json", "jsonl"}));
    CLI::App* verify =
        cmd->add_subcommand("verify", "Check the audit log's hash chain");
    AddCommonFlags(verify, &f->common);
    verify->callback([f = f] {
      Exit(RunAuditVerify(Options(f->common), std::cout, std::cerr));
    });
    cmd->callback([f = f, verify] {
      if (verify->parsed()) return;
      Exit(RunAudit(Options(f->common), f->audit, f->output, std::cout,
                    std::cerr));
    });
  }
}

}  // namespace gpusched::cli
