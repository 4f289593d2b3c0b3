// The Pod writes of the stand-in API server's Store (apiserver.h): create
// (with the real server's decoding, validation and defaults), replace and
// patch (labels and annotations only), binding, and graceful delete.
#include "absl/strings/str_cat.h"
#include "tests/kube/apiserver.h"

namespace gpusched::kubetest {

Reply Store::CreatePod(const std::string& ns, const json& body) {
  if (!body.is_object()) {
    return BadRequest(
        "the object provided is unrecognized (must be of type Pod): couldn't "
        "get version/kind; json parse error: not a JSON object");
  }
  if (body.contains("kind") && body["kind"] != "Pod") {
    return BadRequest(absl::StrCat(
        "the object provided is unrecognized (must be of type Pod): kind ",
        body["kind"].dump()));
  }
  if (body.contains("apiVersion") && body["apiVersion"] != "v1") {
    return BadRequest(absl::StrCat("the API version in the data (",
                                   body["apiVersion"].dump(),
                                   ") does not match the expected API "
                                   "version (v1)"));
  }
  std::string decode_error;
  ValidatePod(body, &decode_error);
  if (!decode_error.empty()) return BadRequest(decode_error);
  json pod = body;
  json& meta = pod["metadata"];
  if (meta.is_null()) meta = json::object();
  if (!meta.value("namespace", "").empty() && meta["namespace"] != ns) {
    return BadRequest(
        "the namespace of the provided object does not match the namespace "
        "sent on the request");
  }
  if (!meta.value("resourceVersion", "").empty()) {
    return StatusReply(500, "InternalError",
                       "Internal error occurred: resourceVersion should not "
                       "be set on objects to be created");
  }
  meta["namespace"] = ns;
  const std::string generate = meta.value("generateName", "");
  const bool generated = meta.value("name", "").empty() && !generate.empty();
  absl::MutexLock l(&mu_);
  // Generated names are retried on a collision, as the real server does.
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (generated) {
      static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
      std::string name = generate.substr(0, 58);
      for (int i = 0; i < 5; ++i) name += kAlphabet[rng_.Uniform(27)];
      meta["name"] = name;
    }
    if (!objects_[0].contains(PodKey(ns, meta.value("name", "")))) break;
  }
  const std::string name = meta.value("name", "");
  std::vector<json> causes = ValidatePod(pod, &decode_error);
  if (!causes.empty()) return InvalidReply("Pod", name, causes);
  const std::string key = PodKey(ns, name);
  if (objects_[0].contains(key)) {
    return StatusReply(409, "AlreadyExists",
                       absl::StrCat("pods \"", name, "\" already exists"),
                       {{"name", name}, {"kind", "pods"}});
  }
  if (object_count() >= options_.max_objects) {
    return StatusReply(403, "Forbidden",
                       absl::StrCat("exceeded quota: this stand-in API server "
                                    "holds at most ",
                                    options_.max_objects, " objects"));
  }
  pod["kind"] = "Pod";
  pod["apiVersion"] = "v1";
  meta["uid"] = RandomUid(rng_);
  meta["creationTimestamp"] = NowRfc3339();
  for (const char* f : {"deletionTimestamp", "deletionGracePeriodSeconds",
                        "resourceVersion", "selfLink"}) {
    meta.erase(f);
  }
  DefaultPod(pod);
  Commit(Kind::kPod, key, pod, "ADDED");
  return OkReply(201, *objects_[0][key]);
}

// Pod `key` (now `cur`) with the labels and annotations of `meta`.
Reply Store::CommitMetadata(const std::string& key, const json& cur,
                            const json& meta) {
  json next = cur;
  for (const char* f : {"labels", "annotations"}) {
    if (meta.contains(f) && !meta[f].is_null()) {
      next["metadata"][f] = meta[f];
    } else {
      next["metadata"].erase(f);
    }
  }
  if (next != cur) Commit(Kind::kPod, key, std::move(next), "MODIFIED");
  return OkReply(200, *objects_[0][key]);
}

Reply Store::ReplacePod(const std::string& ns, const std::string& name,
                        const json& body) {
  if (!body.is_object() || (body.contains("kind") && body["kind"] != "Pod")) {
    return BadRequest(
        "the object provided is unrecognized (must be of type Pod)");
  }
  std::string decode_error;
  ValidatePod(body, &decode_error);
  if (!decode_error.empty()) return BadRequest(decode_error);
  const json meta = body.value("metadata", json::object());
  if (meta.value("name", "") != name) {
    return BadRequest(
        absl::StrCat("the name of the object (", meta.value("name", ""),
                     ") does not match the name on the URL (", name, ")"));
  }
  if (!meta.value("namespace", "").empty() && meta["namespace"] != ns) {
    return BadRequest(
        "the namespace of the provided object does not match the namespace "
        "sent on the request");
  }
  absl::MutexLock l(&mu_);
  const std::string key = PodKey(ns, name);
  auto it = objects_[0].find(key);
  if (it == objects_[0].end()) return NotFound(Kind::kPod, name);
  const json& cur = *it->second;
  const std::string rv = meta.value("resourceVersion", "");
  if (!rv.empty() && rv != cur["metadata"]["resourceVersion"]) {
    return ConflictReply(
        "pods", name,
        "the object has been modified; please apply your changes "
        "to the latest version and try again");
  }
  if (auto causes = ValidateLabelsAndAnnotations(meta); !causes.empty()) {
    return InvalidReply("Pod", name, causes);
  }
  // Only labels and annotations change here (spec and status are the
  // kubelet's and immutable); the rest of the body is ignored.
  return CommitMetadata(key, cur, meta);
}

Reply Store::PatchPod(const std::string& ns, const std::string& name,
                      const std::string& type, const json& patch) {
  const bool merge = type.starts_with("application/merge-patch+json") ||
                     type.starts_with("application/strategic-merge-patch+json");
  const bool json_patch = type.starts_with("application/json-patch+json");
  if (!merge && !json_patch) {
    return StatusReply(
        415, "UnsupportedMediaType",
        absl::StrCat("the body of the request was in an unknown format - "
                     "accepted media types include: "
                     "application/json-patch+json, "
                     "application/merge-patch+json, "
                     "application/strategic-merge-patch+json (got \"",
                     type, "\")"));
  }
  absl::MutexLock l(&mu_);
  const std::string key = PodKey(ns, name);
  auto it = objects_[0].find(key);
  if (it == objects_[0].end()) return NotFound(Kind::kPod, name);
  const json& cur = *it->second;
  json patched = cur;
  try {  // nlohmann's patch functions throw on a malformed patch
    if (merge) {
      patched.merge_patch(patch);
    } else {
      patched = cur.patch(patch);
    }
  } catch (const std::exception& e) {
    return StatusReply(422, "Invalid",
                       absl::StrCat("the server rejected our request due to "
                                    "an error in our request: ",
                                    e.what()));
  }
  const json meta = patched.value("metadata", json::object());
  if (meta.value("resourceVersion", "") != cur["metadata"]["resourceVersion"]) {
    return ConflictReply(
        "pods", name,
        "the object has been modified; please apply your changes "
        "to the latest version and try again");
  }
  std::string decode_error;
  ValidatePod(patched, &decode_error);
  if (!decode_error.empty()) return BadRequest(decode_error);
  if (auto causes = ValidateLabelsAndAnnotations(meta); !causes.empty()) {
    return InvalidReply("Pod", name, causes);
  }
  return CommitMetadata(key, cur, meta);
}

Reply Store::BindPod(const std::string& ns, const std::string& name,
                     const json& body) {
  if (!body.is_object() ||
      (body.contains("kind") && body["kind"] != "Binding")) {
    return BadRequest(
        "the object provided is unrecognized (must be of type Binding)");
  }
  const json meta = body.value("metadata", json::object());
  if (!meta.is_object() ||
      (!meta.value("name", "").empty() && meta["name"] != name)) {
    return BadRequest("name in URL does not match name in Binding object");
  }
  const json target = body.value("target", json::object());
  if (!target.is_object() || !target.value("name", json("")).is_string() ||
      target.value("name", "").empty()) {
    return InvalidReply("Binding", name,
                        {{{"reason", "FieldValueRequired"},
                          {"field", "target.name"},
                          {"message", "Required value"}}});
  }
  if (!target.value("kind", "").empty() && target["kind"] != "Node") {
    return InvalidReply(
        "Binding", name,
        {{{"reason", "FieldValueNotSupported"},
          {"field", "target.kind"},
          {"message", "Unsupported value: " + target["kind"].dump() +
                          ": supported values: \"Node\""}}});
  }
  const std::string node = target["name"];
  absl::MutexLock l(&mu_);
  const std::string key = PodKey(ns, name);
  auto it = objects_[0].find(key);
  if (it == objects_[0].end()) return NotFound(Kind::kPod, name);
  json pod = *it->second;
  if (pod["metadata"].contains("deletionTimestamp")) {
    return ConflictReply(
        "pods/binding", name,
        absl::StrCat("pod ", name,
                     " is being deleted, cannot be assigned to a "
                     "host"));
  }
  const std::string bound = pod["spec"].value("nodeName", "");
  if (!bound.empty()) {
    return ConflictReply(
        "pods/binding", name,
        absl::StrCat("pod ", name, " is already assigned to node \"", bound,
                     "\""));
  }
  // The real server does not check the node; this stand-in does, so that a
  // binding to a node that does not exist is caught (see the header).
  if (!objects_[1].contains(node)) return NotFound(Kind::kNode, node);
  pod["spec"]["nodeName"] = node;
  SetCondition(pod["status"], "PodScheduled", "True");
  Commit(Kind::kPod, key, std::move(pod), "MODIFIED");
  return OkReply(201, {{"kind", "Status"},
                       {"apiVersion", "v1"},
                       {"metadata", json::object()},
                       {"status", "Success"},
                       {"code", 201}});
}

Reply Store::DeletePod(const std::string& ns, const std::string& name,
                       std::optional<int64_t> grace, const json& options) {
  json pre = json::object();
  if (options.is_object()) {
    if (options.contains("kind") && options["kind"] != "DeleteOptions") {
      return BadRequest(
          "the object provided is unrecognized (must be of type "
          "DeleteOptions)");
    }
    const json g = options.value("gracePeriodSeconds", json());
    if (!g.is_null() && !g.is_number_integer()) {
      return BadRequest(
          "json: cannot unmarshal into Go struct field "
          "DeleteOptions.gracePeriodSeconds of type int64");
    }
    if (!grace && g.is_number_integer()) grace = g.get<int64_t>();
    pre = options.value("preconditions", json::object());
  } else if (!options.is_null()) {
    return BadRequest(
        "the object provided is unrecognized (must be of type DeleteOptions)");
  }
  absl::MutexLock l(&mu_);
  const std::string key = PodKey(ns, name);
  auto it = objects_[0].find(key);
  if (it == objects_[0].end()) return NotFound(Kind::kPod, name);
  json pod = *it->second;
  json& meta = pod["metadata"];
  if (pre.is_object()) {
    for (const char* f : {"uid", "resourceVersion"}) {
      if (pre.value(f, json()).is_string() && pre[f] != meta[f]) {
        return ConflictReply(
            "pods", name,
            absl::StrCat(
                "Precondition failed: ",
                absl::string_view(f) == "uid" ? "UID" : "ResourceVersion",
                " in precondition: ", pre[f].get<std::string>(), ", ",
                absl::string_view(f) == "uid" ? "UID" : "ResourceVersion",
                " in object meta: ", meta.value(f, "")));
      }
    }
  }
  // The pod strategy: its own grace period unless the request gives one;
  // at once for a pod never scheduled or already terminated.
  int64_t period = pod["spec"].value("terminationGracePeriodSeconds", 30);
  if (grace) period = *grace;
  if (period < 0) period = 1;
  const std::string phase = pod["status"].value("phase", "");
  if (pod["spec"].value("nodeName", "").empty() || phase == "Succeeded" ||
      phase == "Failed") {
    period = 0;
  }
  if (period == 0) {
    RemovePodLocked(key);
    json gone = pod;
    gone["metadata"]["resourceVersion"] = std::to_string(rv_);
    return OkReply(200, std::move(gone));
  }
  const std::time_t deadline = std::time(nullptr) + period;
  const auto current = ParseRfc3339(meta.value("deletionTimestamp", ""));
  if (!current || deadline < *current) {
    meta["deletionTimestamp"] = Rfc3339(deadline);
    meta["deletionGracePeriodSeconds"] = period;
    Commit(Kind::kPod, key, std::move(pod), "MODIFIED");
  }
  return OkReply(200, *objects_[0][key]);
}

}  // namespace gpusched::kubetest
