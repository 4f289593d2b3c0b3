// Status objects, selectors, and the Pod validation and defaulting of the
// stand-in API server (apiserver.h). Messages follow the real server's
// wording where a client might show or match them.
#include <ctime>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/kube/apiserver.h"

namespace gpusched::kubetest {

Reply StatusReply(int code, const std::string& reason,
                  const std::string& message, json details) {
  Reply r;
  r.code = code;
  r.body = {{"kind", "Status"},           {"apiVersion", "v1"},
            {"metadata", json::object()}, {"status", "Failure"},
            {"message", message},         {"reason", reason}};
  if (!details.is_null()) r.body["details"] = std::move(details);
  r.body["code"] = code;
  return r;
}

Reply NotFound(Kind kind, const std::string& name) {
  return StatusReply(
      404, "NotFound",
      absl::StrCat(ResourceName(kind), " \"", name, "\" not found"),
      {{"name", name}, {"kind", ResourceName(kind)}});
}

Reply BadRequest(const std::string& message) {
  return StatusReply(400, "BadRequest", message);
}

Reply InvalidReply(const std::string& kind, const std::string& name,
                   const std::vector<json>& causes) {
  std::vector<std::string> parts;
  for (const json& c : causes) {
    parts.push_back(
        absl::StrCat(c.value("field", ""), ": ", c.value("message", "")));
  }
  std::string what = parts.size() == 1
                         ? parts[0]
                         : absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  return StatusReply(422, "Invalid",
                     absl::StrCat(kind, " \"", name, "\" is invalid: ", what),
                     {{"name", name}, {"kind", kind}, {"causes", causes}});
}

Reply ConflictReply(const std::string& resource, const std::string& name,
                    const std::string& why) {
  return StatusReply(409, "Conflict",
                     absl::StrCat("Operation cannot be fulfilled on ", resource,
                                  " \"", name, "\": ", why),
                     {{"name", name}, {"kind", resource}});
}

Reply OkReply(int code, json body) {
  Reply r;
  r.code = code;
  r.body = std::move(body);
  return r;
}

std::string PodKey(const std::string& ns, const std::string& name) {
  return absl::StrCat(ns, "/", name);
}

std::string NodeReadyStatus(const json& node) {
  for (const json& c : node["status"].value("conditions", json::array())) {
    if (c.value("type", "") == "Ready") return c.value("status", "");
  }
  return "";
}

std::string NowRfc3339() { return Rfc3339(std::time(nullptr)); }

std::optional<std::time_t> ParseRfc3339(const std::string& s) {
  std::tm tm{};
  if (std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%dZ", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return timegm(&tm);
}

void SetCondition(json& status, const std::string& type,
                  const std::string& value, const std::string& reason,
                  const std::string& message) {
  if (!status.contains("conditions") || !status["conditions"].is_array()) {
    status["conditions"] = json::array();
  }
  json* found = nullptr;
  for (json& c : status["conditions"]) {
    if (c.value("type", "") == type) found = &c;
  }
  if (found == nullptr) {
    status["conditions"].push_back({{"type", type}});
    found = &status["conditions"].back();
  }
  json& c = *found;
  if (c.value("status", "") != value) c["lastTransitionTime"] = NowRfc3339();
  c["status"] = value;
  c["lastProbeTime"] = nullptr;
  if (reason.empty()) {
    c.erase("reason");
  } else {
    c["reason"] = reason;
  }
  if (message.empty()) {
    c.erase("message");
  } else {
    c["message"] = message;
  }
}

std::string Rfc3339(std::time_t t) {
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string RandomUid(Rng& rng) {
  // A version 4 UUID.
  const uint64_t a = rng.Next(), b = rng.Next();
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-4%03x-%04x-%012llx",
                static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff),
                static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

namespace {

bool IsAlnum(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c));
}
bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool IsDns1123Label(absl::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

bool IsDns1123Subdomain(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (absl::string_view part : absl::StrSplit(s, '.')) {
    if (part.empty() || !IsLowerAlnum(part.front()) ||
        !IsLowerAlnum(part.back())) {
      return false;
    }
    for (char c : part) {
      if (!IsLowerAlnum(c) && c != '-') return false;
    }
  }
  return true;
}

// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
bool IsLabelToken(absl::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bool IsQualifiedName(absl::string_view s) {
  const size_t slash = s.find('/');
  if (slash != absl::string_view::npos) {
    if (!IsDns1123Subdomain(s.substr(0, slash))) return false;
    s = s.substr(slash + 1);
  }
  return IsLabelToken(s);
}

bool IsLabelValue(absl::string_view s) { return s.empty() || IsLabelToken(s); }

bool IsEnvVarName(absl::string_view s) {
  if (s.empty()) return false;
  if (absl::ascii_isdigit(static_cast<unsigned char>(s.front()))) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

json Cause(const std::string& reason, const std::string& field,
           const std::string& message) {
  return {{"reason", reason}, {"message", message}, {"field", field}};
}

json Required(const std::string& field) {
  return Cause("FieldValueRequired", field, "Required value");
}

json Invalid(const std::string& field, const json& value,
             const std::string& why) {
  return Cause("FieldValueInvalid", field,
               absl::StrCat("Invalid value: ", value.dump(), ": ", why));
}

constexpr char kSubdomainHelp[] =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
constexpr char kLabelHelp[] =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
    "characters or '-', and must start and end with an alphanumeric "
    "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
constexpr char kQualifiedHelp[] =
    "name part must consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'MyName',  or "
    "'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
    "subdomain prefix and '/' (e.g. 'example.com/MyName')";
constexpr char kLabelValueHelp[] =
    "a valid label must be an empty string or consist of alphanumeric "
    "characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?"
    "[A-Za-z0-9])?')";

// Go's encoding/json names of JSON types, for decode errors.
const char* GoJsonType(const json& v) {
  if (v.is_string()) return "string";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "bool";
  if (v.is_array()) return "array";
  return "object";
}

// The decode step: the real server rejects a wrong JSON type (400) before
// it validates anything.
class Decoder {
 public:
  // `want`: "string", "int64", "bool", "object", "array", "map[string]string",
  // "[]string". Null and absent are always fine (Go's zero value).
  void Want(const json& parent, const char* key, absl::string_view want,
            const std::string& path) {
    if (!error.empty() || !parent.is_object()) return;
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return;
    const json& v = *it;
    bool ok = false;
    if (want == "string") ok = v.is_string();
    if (want == "int64") ok = v.is_number_integer();
    if (want == "bool") ok = v.is_boolean();
    if (want == "object") ok = v.is_object();
    if (want == "array") ok = v.is_array();
    if (want == "map[string]string") {
      ok = v.is_object();
      for (const auto& [k, x] : v.items()) ok = ok && x.is_string();
    }
    if (want == "[]string") {
      ok = v.is_array();
      for (const json& x : v) ok = ok && x.is_string();
    }
    if (want == "quantities") {
      ok = v.is_object();
      for (const auto& [k, x] : v.items()) {
        ok = ok && (x.is_string() || x.is_number()) &&
             ParseQuantityMilli(x).has_value();
      }
    }
    if (!ok) {
      error = absl::StrCat(
          "Pod in version \"v1\" cannot be handled as a Pod: json: cannot "
          "unmarshal ",
          GoJsonType(v), " into Go struct field ", path, " of type ", want);
    }
  }
  std::string error;
};

}  // namespace

// ---- selectors ----

absl::StatusOr<LabelSelector> LabelSelector::Parse(absl::string_view text) {
  LabelSelector sel;
  // Split on commas outside parentheses.
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  if (parts.size() == 1 && absl::StripAsciiWhitespace(parts[0]).empty()) {
    return sel;  // everything
  }
  for (const std::string& raw : parts) {
    absl::string_view p = absl::StripAsciiWhitespace(raw);
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unable to parse requirement: ", why, " in \"", p, "\""));
    };
    if (p.empty()) return bad("found '', expected: identifier");
    Requirement r;
    if (p.front() == '!') {
      r.key = std::string(absl::StripAsciiWhitespace(p.substr(1)));
      r.op = Op::kNotExists;
    } else {
      size_t i = 0;
      while (i < p.size() && !absl::ascii_isspace(p[i]) && p[i] != '=' &&
             p[i] != '!' && p[i] != '(') {
        ++i;
      }
      r.key = std::string(p.substr(0, i));
      absl::string_view rest = absl::StripAsciiWhitespace(p.substr(i));
      if (rest.empty()) {
        r.op = Op::kExists;
      } else if (absl::StartsWith(rest, "==") || absl::StartsWith(rest, "!=") ||
                 absl::StartsWith(rest, "=")) {
        r.op = rest[0] == '!' ? Op::kNe : Op::kEq;
        const size_t skip =
            rest[0] == '=' && (rest.size() < 2 || rest[1] != '=') ? 1 : 2;
        std::string v(absl::StripAsciiWhitespace(rest.substr(skip)));
        if (!IsLabelValue(v))
          return bad(absl::StrCat("invalid label value \"", v, "\""));
        r.values.insert(std::move(v));
      } else if (absl::StartsWith(rest, "in") ||
                 absl::StartsWith(rest, "notin")) {
        r.op = absl::StartsWith(rest, "in") ? Op::kIn : Op::kNotIn;
        rest = absl::StripAsciiWhitespace(rest.substr(r.op == Op::kIn ? 2 : 5));
        if (rest.size() < 2 || rest.front() != '(' || rest.back() != ')') {
          return bad("expected a value list in parentheses");
        }
        for (absl::string_view v :
             absl::StrSplit(rest.substr(1, rest.size() - 2), ',')) {
          std::string s(absl::StripAsciiWhitespace(v));
          if (!IsLabelValue(s))
            return bad(absl::StrCat("invalid label value \"", s, "\""));
          r.values.insert(std::move(s));
        }
      } else {
        return bad(absl::StrCat("unexpected \"", rest, "\""));
      }
    }
    if (!IsQualifiedName(r.key)) {
      return bad(
          absl::StrCat("invalid label key \"", r.key, "\": ", kQualifiedHelp));
    }
    sel.reqs_.push_back(std::move(r));
  }
  return sel;
}

bool LabelSelector::Matches(const json& labels) const {
  for (const Requirement& r : reqs_) {
    const bool has = labels.is_object() && labels.contains(r.key) &&
                     labels[r.key].is_string();
    const std::string v = has ? labels[r.key].get<std::string>() : "";
    bool ok = false;
    switch (r.op) {
      case Op::kEq:
      case Op::kIn:
        ok = has && r.values.contains(v);
        break;
      case Op::kNe:
      case Op::kNotIn:
        ok = !has || !r.values.contains(v);
        break;
      case Op::kExists:
        ok = has;
        break;
      case Op::kNotExists:
        ok = !has;
        break;
    }
    if (!ok) return false;
  }
  return true;
}

namespace {

const std::set<std::string>& FieldLabels(Kind kind) {
  static const std::set<std::string> pods = {
      "metadata.name",      "metadata.namespace",
      "spec.nodeName",      "spec.restartPolicy",
      "spec.schedulerName", "spec.serviceAccountName",
      "spec.hostNetwork",   "status.phase",
      "status.podIP",       "status.nominatedNodeName"};
  static const std::set<std::string> nodes = {"metadata.name",
                                              "spec.unschedulable"};
  return kind == Kind::kPod ? pods : nodes;
}

std::string FieldValue(const json& object, const std::string& field) {
  const json* cur = &object;
  for (absl::string_view part : absl::StrSplit(field, '.')) {
    if (!cur->is_object()) return "";
    auto it = cur->find(std::string(part));
    if (it == cur->end()) {
      cur = nullptr;
      break;
    }
    cur = &*it;
  }
  if (cur == nullptr || cur->is_null()) {
    return field == "spec.unschedulable" || field == "spec.hostNetwork"
               ? "false"
               : "";
  }
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_boolean()) return cur->get<bool>() ? "true" : "false";
  return cur->dump();
}

}  // namespace

absl::StatusOr<FieldSelector> FieldSelector::Parse(absl::string_view text,
                                                   Kind kind) {
  FieldSelector sel;
  if (absl::StripAsciiWhitespace(text).empty()) return sel;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    absl::string_view p = absl::StripAsciiWhitespace(raw);
    Term t;
    size_t op = p.find("!=");
    size_t len = 2;
    t.equal = op == absl::string_view::npos;
    if (t.equal) {
      op = p.find("==");
      if (op == absl::string_view::npos) {
        op = p.find('=');
        len = 1;
      }
    }
    if (op == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid selector: '", text, "'; can't understand '", p, "'"));
    }
    t.field = std::string(absl::StripAsciiWhitespace(p.substr(0, op)));
    t.value = std::string(absl::StripAsciiWhitespace(p.substr(op + len)));
    if (!FieldLabels(kind).contains(t.field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("field label not supported: ", t.field));
    }
    sel.terms_.push_back(std::move(t));
  }
  return sel;
}

bool FieldSelector::Matches(const json& object) const {
  for (const Term& t : terms_) {
    if ((FieldValue(object, t.field) == t.value) != t.equal) return false;
  }
  return true;
}

bool Filter::Matches(const json& object) const {
  const json& meta = object["metadata"];
  if (!ns.empty() && meta.value("namespace", "") != ns) return false;
  return labels.Matches(meta.value("labels", json())) && fields.Matches(object);
}

// ---- validation and defaults ----

std::vector<json> ValidateLabelsAndAnnotations(const json& metadata) {
  std::vector<json> causes;
  if (!metadata.is_object()) return causes;
  const json labels = metadata.value("labels", json::object());
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (!IsQualifiedName(k)) {
        causes.push_back(Invalid("metadata.labels", k, kQualifiedHelp));
      }
      if (v.is_string() && !IsLabelValue(v.get<std::string>())) {
        causes.push_back(Invalid("metadata.labels", v, kLabelValueHelp));
      }
    }
  }
  const json annotations = metadata.value("annotations", json::object());
  if (annotations.is_object()) {
    size_t total = 0;
    for (const auto& [k, v] : annotations.items()) {
      if (!IsQualifiedName(absl::AsciiStrToLower(k))) {
        causes.push_back(Invalid("metadata.annotations", k, kQualifiedHelp));
      }
      total += k.size() + (v.is_string() ? v.get<std::string>().size() : 0);
    }
    if (total > 256 * 1024) {
      causes.push_back(Cause("FieldValueTooLong", "metadata.annotations",
                             "Too long: must have at most 262144 bytes"));
    }
  }
  return causes;
}

std::vector<json> ValidatePod(const json& pod, std::string* decode_error) {
  Decoder d;
  d.Want(pod, "metadata", "object", "Pod.metadata");
  const json meta = pod.value("metadata", json::object());
  for (const char* f :
       {"name", "generateName", "namespace", "resourceVersion", "uid"}) {
    d.Want(meta, f, "string", absl::StrCat("ObjectMeta.metadata.", f));
  }
  d.Want(meta, "labels", "map[string]string", "ObjectMeta.metadata.labels");
  d.Want(meta, "annotations", "map[string]string",
         "ObjectMeta.metadata.annotations");
  d.Want(pod, "spec", "object", "Pod.spec");
  const json spec = pod.value("spec", json::object());
  for (const char* f :
       {"nodeName", "restartPolicy", "serviceAccountName", "schedulerName"}) {
    d.Want(spec, f, "string", absl::StrCat("PodSpec.spec.", f));
  }
  d.Want(spec, "terminationGracePeriodSeconds", "int64",
         "PodSpec.spec.terminationGracePeriodSeconds");
  d.Want(spec, "nodeSelector", "map[string]string",
         "PodSpec.spec.nodeSelector");
  d.Want(spec, "tolerations", "array", "PodSpec.spec.tolerations");
  d.Want(spec, "containers", "array", "PodSpec.spec.containers");
  const json containers = spec.value("containers", json::array());
  if (containers.is_array()) {
    for (const json& c : containers) {
      if (!c.is_object()) {
        d.Want(json{{"c", c}}, "c", "object", "PodSpec.spec.containers");
        continue;
      }
      for (const char* f : {"name", "image", "workingDir"}) {
        d.Want(c, f, "string", absl::StrCat("Container.spec.containers.", f));
      }
      d.Want(c, "command", "[]string", "Container.spec.containers.command");
      d.Want(c, "args", "[]string", "Container.spec.containers.args");
      d.Want(c, "env", "array", "Container.spec.containers.env");
      d.Want(c, "ports", "array", "Container.spec.containers.ports");
      d.Want(c, "readinessProbe", "object",
             "Container.spec.containers.readinessProbe");
      d.Want(c, "resources", "object", "Container.spec.containers.resources");
      const json res = c.value("resources", json::object());
      d.Want(res, "limits", "quantities",
             "ResourceRequirements.spec.containers.resources.limits");
      d.Want(res, "requests", "quantities",
             "ResourceRequirements.spec.containers.resources.requests");
      for (const json& e : c.value("env", json::array())) {
        d.Want(json{{"e", e}}, "e", "object", "Container.spec.containers.env");
        d.Want(e, "name", "string", "EnvVar.spec.containers.env.name");
        d.Want(e, "value", "string", "EnvVar.spec.containers.env.value");
        d.Want(e, "valueFrom", "object",
               "EnvVar.spec.containers.env.valueFrom");
        const json from = e.is_object() ? e.value("valueFrom", json()) : json();
        d.Want(from, "fieldRef", "object",
               "EnvVarSource.spec.containers.env.valueFrom.fieldRef");
        if (from.is_object()) {
          d.Want(from.value("fieldRef", json()), "fieldPath", "string",
                 "ObjectFieldSelector.spec.containers.env.valueFrom.fieldRef."
                 "fieldPath");
        }
      }
      const json probe = c.value("readinessProbe", json());
      for (const char* f :
           {"periodSeconds", "timeoutSeconds", "successThreshold",
            "failureThreshold", "initialDelaySeconds"}) {
        d.Want(probe, f, "int64",
               absl::StrCat("Probe.spec.containers.readinessProbe.", f));
      }
      for (const char* h : {"httpGet", "tcpSocket", "exec"}) {
        d.Want(probe, h, "object",
               absl::StrCat("Probe.spec.containers.readinessProbe.", h));
        const json handler =
            probe.is_object() ? probe.value(h, json()) : json();
        d.Want(handler, "path", "string", "HTTPGetAction.path");
        d.Want(handler, "host", "string", "HTTPGetAction.host");
        d.Want(handler, "scheme", "string", "HTTPGetAction.scheme");
        d.Want(handler, "httpHeaders", "array", "HTTPGetAction.httpHeaders");
        d.Want(handler, "command", "[]string", "ExecAction.command");
        if (handler.is_object() && handler.contains("port") &&
            !handler["port"].is_number_integer() &&
            !handler["port"].is_string()) {
          d.Want(handler, "port", "int64", "HTTPGetAction.port");
        }
      }
      for (const json& p : c.value("ports", json::array())) {
        d.Want(json{{"p", p}}, "p", "object",
               "Container.spec.containers.ports");
        d.Want(p, "containerPort", "int64",
               "ContainerPort.spec.containers.ports.containerPort");
        d.Want(p, "name", "string", "ContainerPort.spec.containers.ports.name");
      }
    }
  }
  if (!d.error.empty()) {
    *decode_error = d.error;
    return {};
  }

  std::vector<json> causes;
  const std::string name = meta.value("name", "");
  if (name.empty()) {
    causes.push_back(Cause("FieldValueRequired", "metadata.name",
                           "Required value: name or generateName is required"));
  } else if (!IsDns1123Subdomain(name)) {
    causes.push_back(Invalid("metadata.name", name, kSubdomainHelp));
  }
  for (json& c : ValidateLabelsAndAnnotations(meta)) causes.push_back(c);
  if (!containers.is_array() || containers.empty()) {
    causes.push_back(Required("spec.containers"));
  } else {
    std::set<std::string> names;
    for (size_t i = 0; i < containers.size(); ++i) {
      const json& c = containers[i];
      const std::string at = absl::StrCat("spec.containers[", i, "]");
      const std::string cname = c.value("name", "");
      if (cname.empty()) {
        causes.push_back(Required(at + ".name"));
      } else if (!IsDns1123Label(cname)) {
        causes.push_back(Invalid(at + ".name", cname, kLabelHelp));
      } else if (!names.insert(cname).second) {
        causes.push_back(
            Cause("FieldValueDuplicate", at + ".name",
                  absl::StrCat("Duplicate value: \"", cname, "\"")));
      }
      if (c.value("image", "").empty())
        causes.push_back(Required(at + ".image"));
      const json env = c.value("env", json::array());
      for (size_t j = 0; j < env.size(); ++j) {
        const json& e = env[j];
        const std::string eat = absl::StrCat(at, ".env[", j, "]");
        const std::string ename = e.value("name", "");
        if (ename.empty()) {
          causes.push_back(Required(eat + ".name"));
        } else if (!IsEnvVarName(ename)) {
          causes.push_back(Invalid(
              eat + ".name", ename,
              "a valid environment variable name must consist of alphabetic "
              "characters, digits, '_', '-', or '.', and must not start with "
              "a digit"));
        }
        if (!e.value("value", "").empty() && e.contains("valueFrom") &&
            !e["valueFrom"].is_null()) {
          causes.push_back(Invalid(eat + ".valueFrom", "",
                                   "may not be specified when `value` is not "
                                   "empty"));
        }
        if (e.contains("valueFrom") && e["valueFrom"].is_object() &&
            e["valueFrom"].contains("fieldRef")) {
          static const std::set<std::string> kPaths = {
              "metadata.name",
              "metadata.namespace",
              "metadata.uid",
              "spec.nodeName",
              "spec.serviceAccountName",
              "status.hostIP",
              "status.hostIPs",
              "status.podIP",
              "status.podIPs"};
          const std::string path =
              e["valueFrom"]["fieldRef"].value("fieldPath", "");
          if (!kPaths.contains(path) &&
              !absl::StartsWith(path, "metadata.labels['") &&
              !absl::StartsWith(path, "metadata.annotations['")) {
            causes.push_back(Cause(
                "FieldValueNotSupported", eat + ".valueFrom.fieldRef.fieldPath",
                absl::StrCat("Unsupported value: \"", path, "\"")));
          }
        }
      }
      const json ports = c.value("ports", json::array());
      for (size_t j = 0; j < ports.size(); ++j) {
        const int64_t port = ports[j].value("containerPort", int64_t{0});
        if (port < 1 || port > 65535) {
          causes.push_back(
              Invalid(absl::StrCat(at, ".ports[", j, "].containerPort"), port,
                      "must be between 1 and 65535, inclusive"));
        }
      }
    }
  }
  const std::string policy = spec.value("restartPolicy", "Always");
  if (policy != "Always" && policy != "OnFailure" && policy != "Never") {
    causes.push_back(
        Cause("FieldValueNotSupported", "spec.restartPolicy",
              absl::StrCat("Unsupported value: \"", policy,
                           "\": supported values: \"Always\", \"OnFailure\", "
                           "\"Never\"")));
  }
  return causes;
}

namespace {

void SetIfAbsent(json& obj, const char* key, json value) {
  if (!obj.contains(key) || obj[key].is_null()) obj[key] = std::move(value);
}

void DefaultProbe(json& probe) {
  if (!probe.is_object()) return;
  SetIfAbsent(probe, "timeoutSeconds", 1);
  SetIfAbsent(probe, "periodSeconds", 10);
  SetIfAbsent(probe, "successThreshold", 1);
  SetIfAbsent(probe, "failureThreshold", 3);
  if (probe.contains("httpGet") && probe["httpGet"].is_object()) {
    SetIfAbsent(probe["httpGet"], "scheme", "HTTP");
  }
}

std::string QosClass(const json& containers) {
  bool any = false, guaranteed = true;
  for (const json& c : containers) {
    const json res = c.value("resources", json::object());
    const json req = res.value("requests", json::object());
    const json lim = res.value("limits", json::object());
    for (const char* r : {"cpu", "memory"}) {
      if (req.contains(r) || lim.contains(r)) any = true;
      if (!lim.contains(r) ||
          (req.contains(r) &&
           ParseQuantityMilli(req[r]) != ParseQuantityMilli(lim[r]))) {
        guaranteed = false;
      }
    }
  }
  if (!any) return "BestEffort";
  return guaranteed ? "Guaranteed" : "Burstable";
}

}  // namespace

void DefaultPod(json& pod) {
  json& spec = pod["spec"];
  SetIfAbsent(spec, "restartPolicy", "Always");
  SetIfAbsent(spec, "terminationGracePeriodSeconds", 30);
  SetIfAbsent(spec, "dnsPolicy", "ClusterFirst");
  SetIfAbsent(spec, "schedulerName", "default-scheduler");
  SetIfAbsent(spec, "serviceAccountName", "default");
  SetIfAbsent(spec, "serviceAccount", spec["serviceAccountName"]);
  SetIfAbsent(spec, "securityContext", json::object());
  SetIfAbsent(spec, "enableServiceLinks", true);
  SetIfAbsent(spec, "priority", 0);
  SetIfAbsent(spec, "preemptionPolicy", "PreemptLowerPriority");
  // The DefaultTolerationSeconds admission plugin.
  SetIfAbsent(spec, "tolerations", json::array());
  for (const char* key :
       {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}) {
    bool has = false;
    for (const json& t : spec["tolerations"]) {
      if (t.is_object() && t.value("key", "") == key) has = true;
    }
    if (!has) {
      spec["tolerations"].push_back({{"key", key},
                                     {"operator", "Exists"},
                                     {"effect", "NoExecute"},
                                     {"tolerationSeconds", 300}});
    }
  }
  for (json& c : spec["containers"]) {
    SetIfAbsent(c, "terminationMessagePath", "/dev/termination-log");
    SetIfAbsent(c, "terminationMessagePolicy", "File");
    const std::string image = c.value("image", "");
    const size_t slash = image.rfind('/');
    const size_t colon = image.rfind(':');
    const bool tagged = colon != std::string::npos &&
                        (slash == std::string::npos || colon > slash);
    const bool latest = !tagged || image.substr(colon + 1) == "latest";
    SetIfAbsent(c, "imagePullPolicy",
                image.find('@') == std::string::npos && latest
                    ? "Always"
                    : "IfNotPresent");
    SetIfAbsent(c, "resources", json::object());
    json& res = c["resources"];
    if (res.contains("limits") && res["limits"].is_object()) {
      SetIfAbsent(res, "requests", json::object());
      for (const auto& [k, v] : res["limits"].items()) {
        SetIfAbsent(res["requests"], k.c_str(), v);
      }
    }
    if (c.contains("ports")) {
      for (json& p : c["ports"]) SetIfAbsent(p, "protocol", "TCP");
    }
    for (const char* probe :
         {"readinessProbe", "livenessProbe", "startupProbe"}) {
      if (c.contains(probe)) DefaultProbe(c[probe]);
    }
    if (c.contains("env")) {
      for (json& e : c["env"]) {
        if (e.contains("valueFrom") && e["valueFrom"].is_object() &&
            e["valueFrom"].contains("fieldRef")) {
          SetIfAbsent(e["valueFrom"]["fieldRef"], "apiVersion", "v1");
        }
      }
    }
  }
  pod["status"] = {{"phase", "Pending"},
                   {"qosClass", QosClass(spec["containers"])}};
}

}  // namespace gpusched::kubetest
