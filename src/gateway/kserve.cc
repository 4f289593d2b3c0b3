#include "gateway/kserve.h"

#include <cstdint>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpusched::gateway {
namespace {

using nlohmann::json;

enum class Kind { kBool, kUnsigned, kSigned, kFloat, kBytes };
struct Datatype {
  const char* name;
  Kind kind;
  int bits;
};
constexpr Datatype kDatatypes[] = {
    {"BOOL", Kind::kBool, 1},        {"UINT8", Kind::kUnsigned, 8},
    {"UINT16", Kind::kUnsigned, 16}, {"UINT32", Kind::kUnsigned, 32},
    {"UINT64", Kind::kUnsigned, 64}, {"INT8", Kind::kSigned, 8},
    {"INT16", Kind::kSigned, 16},    {"INT32", Kind::kSigned, 32},
    {"INT64", Kind::kSigned, 64},    {"FP16", Kind::kFloat, 16},
    {"FP32", Kind::kFloat, 32},      {"FP64", Kind::kFloat, 64},
    {"BYTES", Kind::kBytes, 0},
};

const Datatype* FindDatatype(const std::string& name) {
  for (const Datatype& d : kDatatypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string DatatypeNames() {
  std::string out;
  for (const Datatype& d : kDatatypes) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", d.name);
  }
  return out;
}

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(what);
}

absl::Status CheckParameters(const json& parent, const std::string& where) {
  auto it = parent.find("parameters");
  if (it != parent.end() && !it->is_object()) {
    return Bad(absl::StrCat(where, "parameters must be an object"));
  }
  return absl::OkStatus();
}

// Whether `v` is a valid element of `type`.
bool ElementOk(const json& v, const Datatype& type) {
  switch (type.kind) {
    case Kind::kBool:
      return v.is_boolean();
    case Kind::kBytes:
      return v.is_string();
    case Kind::kFloat:
      return v.is_number();
    case Kind::kUnsigned: {
      if (v.is_number_unsigned()) {
        return type.bits == 64 ||
               v.get<uint64_t>() <= (uint64_t{1} << type.bits) - 1;
      }
      return v.is_number_integer() && v.get<int64_t>() >= 0 &&
             (type.bits == 64 ||
              v.get<int64_t>() <= (int64_t{1} << type.bits) - 1);
    }
    case Kind::kSigned: {
      if (v.is_number_unsigned()) {
        return v.get<uint64_t>() <=
               (type.bits == 64
                    ? static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                    : (uint64_t{1} << (type.bits - 1)) - 1);
      }
      if (!v.is_number_integer()) return false;
      if (type.bits == 64) return true;
      const int64_t x = v.get<int64_t>();
      const int64_t lim = int64_t{1} << (type.bits - 1);
      return x >= -lim && x < lim;
    }
  }
  return false;
}

// Counts the leaves of `data` (nested arrays flatten, row-major), checking
// each against `type`; iterative, so deep nesting cannot exhaust the stack.
absl::Status CountElements(const json& data, const Datatype& type,
                           const std::string& where, int64_t limit,
                           int64_t* count) {
  *count = 0;
  std::vector<const json*> stack = {&data};
  while (!stack.empty()) {
    const json* v = stack.back();
    stack.pop_back();
    if (v->is_array()) {
      for (auto it = v->rbegin(); it != v->rend(); ++it) stack.push_back(&*it);
      continue;
    }
    if (!ElementOk(*v, type)) {
      return Bad(absl::StrCat(where, "data element ", *count, " (", v->dump(),
                              ") is not a valid ", type.name, " value"));
    }
    if (++*count > limit) break;  // more than the shape holds
  }
  return absl::OkStatus();
}

absl::Status CheckInput(const json& in, int i, std::set<std::string>* names) {
  std::string where = absl::StrCat("inputs[", i, "]: ");
  if (!in.is_object()) return Bad(absl::StrCat(where, "must be an object"));
  auto name = in.find("name");
  if (name == in.end() || !name->is_string() ||
      name->get<std::string>().empty()) {
    return Bad(absl::StrCat(where, "name must be a non-empty string"));
  }
  where = absl::StrCat("inputs[", i, "] (", name->get<std::string>(), "): ");
  if (!names->insert(name->get<std::string>()).second) {
    return Bad(absl::StrCat(where, "the name is used by another input"));
  }
  auto datatype = in.find("datatype");
  const Datatype* type = datatype != in.end() && datatype->is_string()
                             ? FindDatatype(datatype->get<std::string>())
                             : nullptr;
  if (type == nullptr) {
    return Bad(absl::StrCat(
        where, "datatype must be one of ", DatatypeNames(),
        datatype == in.end() ? " (missing)"
                             : absl::StrCat(" (got ", datatype->dump(), ")")));
  }
  auto shape = in.find("shape");
  if (shape == in.end() || !shape->is_array()) {
    return Bad(absl::StrCat(where, "shape must be an array of dimensions"));
  }
  if (shape->size() > static_cast<size_t>(kMaxRank)) {
    return Bad(absl::StrCat(where, "shape has ", shape->size(),
                            " dimensions; at most ", kMaxRank));
  }
  int64_t elements = 1;
  for (size_t d = 0; d < shape->size(); ++d) {
    const json& dim = (*shape)[d];
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
      return Bad(absl::StrCat(where, "shape[", d,
                              "] must be an integer >= 0 (got ", dim.dump(),
                              ")"));
    }
    const int64_t n = dim.get<int64_t>();
    if (n > 0 && elements > kMaxElements / n) {
      return Bad(absl::StrCat(where, "shape holds more than ", kMaxElements,
                              " elements"));
    }
    elements *= n;
  }
  if (absl::Status st = CheckParameters(in, where); !st.ok()) return st;
  auto params = in.find("parameters");
  if (params != in.end() && params->contains("binary_data_size")) {
    return Bad(
        absl::StrCat(where,
                     "the binary tensor data extension is not supported; "
                     "send the data as JSON"));
  }
  auto data = in.find("data");
  if (data == in.end()) return Bad(absl::StrCat(where, "data is missing"));
  int64_t count = 0;
  if (absl::Status st = CountElements(*data, *type, where, elements, &count);
      !st.ok()) {
    return st;
  }
  if (count != elements) {
    return Bad(absl::StrCat(where, "shape ", shape->dump(), " holds ", elements,
                            " elements but data has ",
                            count > elements ? "more" : std::to_string(count)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateInferRequest(const json& body) {
  if (!body.is_object()) {
    return Bad(
        "the body must be a JSON object (a KServe v2 inference request)");
  }
  if (auto id = body.find("id"); id != body.end() && !id->is_string()) {
    return Bad("id must be a string");
  }
  if (absl::Status st = CheckParameters(body, ""); !st.ok()) return st;
  auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_array() || inputs->empty()) {
    return Bad("inputs must be a non-empty array of tensors");
  }
  if (inputs->size() > static_cast<size_t>(kMaxTensors)) {
    return Bad(absl::StrCat("inputs has ", inputs->size(), " tensors; at most ",
                            kMaxTensors));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < inputs->size(); ++i) {
    if (absl::Status st = CheckInput((*inputs)[i], static_cast<int>(i), &names);
        !st.ok()) {
      return st;
    }
  }
  auto outputs = body.find("outputs");
  if (outputs == body.end()) return absl::OkStatus();
  if (!outputs->is_array()) return Bad("outputs must be an array");
  if (outputs->size() > static_cast<size_t>(kMaxTensors)) {
    return Bad(absl::StrCat("outputs has ", outputs->size(),
                            " entries; at most ", kMaxTensors));
  }
  std::set<std::string> wanted;
  for (size_t i = 0; i < outputs->size(); ++i) {
    const json& o = (*outputs)[i];
    const std::string where = absl::StrCat("outputs[", i, "]: ");
    if (!o.is_object() || !o.contains("name") || !o["name"].is_string() ||
        o["name"].get<std::string>().empty()) {
      return Bad(
          absl::StrCat(where, "must be an object with a non-empty name"));
    }
    if (!wanted.insert(o["name"].get<std::string>()).second) {
      return Bad(absl::StrCat(where, "output '", o["name"].get<std::string>(),
                              "' is requested twice"));
    }
    if (absl::Status st = CheckParameters(o, where); !st.ok()) return st;
  }
  return absl::OkStatus();
}

json ServerMetadata(const std::string& version) {
  return {{"name", "gpusched"},
          {"version", version},
          {"extensions", json::array()}};
}

}  // namespace gpusched::gateway
