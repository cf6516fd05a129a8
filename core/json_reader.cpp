#include "core/json_reader.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace gpipe {

Expected<nlohmann::json> LoadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::Invalid(path + ": cannot open the file (does it exist and is it readable?)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Status::Invalid(path + ": read error");
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line 3, column 5: ...".
    std::string what = e.what();
    const std::string tag = "] ";
    const auto pos = what.find(tag);
    if (pos != std::string::npos) what = what.substr(pos + tag.size());
    return Status::Invalid(path + ": not valid JSON: " + what);
  }
}

std::string Describe(const nlohmann::json& value) {
  std::string text = value.dump();
  constexpr size_t kMax = 60;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

ObjectReader::ObjectReader(const nlohmann::json& object, std::string where)
    : object_(object), where_(std::move(where)) {
  if (!object_.is_object()) {
    status_ = Status::Invalid(where_ + ": expected a JSON object, got " + Describe(object_));
  }
}

std::string ObjectReader::Where(std::string_view key) const {
  return where_ + (where_.empty() || where_.back() == ' ' ? "" : ".") + std::string(key);
}

bool ObjectReader::Has(std::string_view key) const { return Raw(key) != nullptr; }

const nlohmann::json* ObjectReader::Raw(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  const auto it = object_.find(std::string(key));
  return it == object_.end() ? nullptr : &*it;
}

void ObjectReader::Fail(std::string_view key, const std::string& message) {
  if (status_.ok()) status_ = Status::Invalid(Where(key) + ": " + message);
}

void ObjectReader::Fail(const Status& status) {
  if (status_.ok() && !status.ok()) status_ = status;
}

const nlohmann::json* ObjectReader::Require(std::string_view key) {
  if (!status_.ok()) return nullptr;
  const nlohmann::json* value = Raw(key);
  if (value == nullptr) {
    status_ = Status::Invalid(where_ + ": missing required field \"" + std::string(key) + "\"");
  }
  return value;
}

std::optional<double> ObjectReader::ReadNumber(std::string_view key, double min, bool exclusive,
                                               bool required) {
  if (!status_.ok()) return std::nullopt;
  const nlohmann::json* value = required ? Require(key) : Raw(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    Fail(key, "expected a number, got " + Describe(*value));
    return std::nullopt;
  }
  const double number = value->get<double>();
  std::ostringstream bound;
  bound << min;
  if (!std::isfinite(number)) {
    Fail(key, "expected a finite number, got " + Describe(*value));
    return std::nullopt;
  }
  if (exclusive ? !(number > min) : !(number >= min)) {
    Fail(key, std::string("expected a number ") + (exclusive ? "> " : ">= ") + bound.str() +
                  ", got " + Describe(*value));
    return std::nullopt;
  }
  return number;
}

double ObjectReader::Number(std::string_view key, double min) {
  return ReadNumber(key, min, false, true).value_or(0.0);
}

double ObjectReader::NumberAbove(std::string_view key, double bound) {
  return ReadNumber(key, bound, true, true).value_or(0.0);
}

std::optional<double> ObjectReader::OptionalNumber(std::string_view key, double min) {
  return ReadNumber(key, min, false, false);
}

int64_t ObjectReader::OptionalInteger(std::string_view key, int64_t min, int64_t max,
                                      int64_t fallback) {
  if (!status_.ok()) return fallback;
  const nlohmann::json* value = Raw(key);
  if (value == nullptr) return fallback;
  const bool whole = value->is_number_integer() ||
                     (value->is_number_float() && std::isfinite(value->get<double>()) &&
                      std::floor(value->get<double>()) == value->get<double>() &&
                      std::fabs(value->get<double>()) < 9.0e18);
  if (!whole) {
    Fail(key, "expected a whole number, got " + Describe(*value));
    return fallback;
  }
  const int64_t number = value->is_number_unsigned() && value->get<uint64_t>() > INT64_MAX
                             ? INT64_MAX
                             : (value->is_number_integer() ? value->get<int64_t>()
                                                           : static_cast<int64_t>(value->get<double>()));
  if (number < min || number > max) {
    std::string range = ">= " + std::to_string(min);
    if (max != INT64_MAX) range = "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    Fail(key, "expected a whole number " + range + ", got " + Describe(*value));
    return fallback;
  }
  return number;
}

int64_t ObjectReader::Integer(std::string_view key, int64_t min, int64_t max) {
  if (Require(key) == nullptr) return min;
  return OptionalInteger(key, min, max, min);
}

int64_t ObjectReader::OptionalBytes(std::string_view key, int64_t fallback) {
  const std::optional<double> number = ReadNumber(key, 0.0, false, false);
  if (!number) return fallback;
  if (*number > 9.0e18) {
    Fail(key, "byte count too large: " + Describe(*Raw(key)));
    return fallback;
  }
  return static_cast<int64_t>(std::llround(*number));
}

int64_t ObjectReader::Bytes(std::string_view key) {
  if (Require(key) == nullptr) return 0;
  return OptionalBytes(key, 0);
}

std::string ObjectReader::String(std::string_view key) {
  const nlohmann::json* value = Require(key);
  if (value == nullptr) return {};
  if (!value->is_string() || value->get<std::string>().empty()) {
    Fail(key, "expected a non-empty string, got " + Describe(*value));
    return {};
  }
  return value->get<std::string>();
}

std::string ObjectReader::OptionalString(std::string_view key, std::string fallback) {
  if (!status_.ok() || !Has(key)) return fallback;
  return String(key);
}

bool ObjectReader::OptionalBool(std::string_view key, bool fallback) {
  if (!status_.ok()) return fallback;
  const nlohmann::json* value = Raw(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) {
    Fail(key, "expected true or false, got " + Describe(*value));
    return fallback;
  }
  return value->get<bool>();
}

const nlohmann::json* ObjectReader::Object(std::string_view key) {
  const nlohmann::json* value = Require(key);
  if (value != nullptr && !value->is_object()) {
    Fail(key, "expected a JSON object, got " + Describe(*value));
    return nullptr;
  }
  return value;
}

const nlohmann::json* ObjectReader::OptionalObject(std::string_view key) {
  if (!status_.ok() || !Has(key)) return nullptr;
  return Object(key);
}

const nlohmann::json* ObjectReader::Array(std::string_view key) {
  const nlohmann::json* value = Require(key);
  if (value != nullptr && !value->is_array()) {
    Fail(key, "expected a JSON array, got " + Describe(*value));
    return nullptr;
  }
  return value;
}

nlohmann::json UnknownFields(const nlohmann::json& object, const std::set<std::string>& known) {
  nlohmann::json extra = nlohmann::json::object();
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0) extra[key] = value;
  }
  return extra;
}

Status CheckFormat(const nlohmann::json& object, const std::string& where,
                   std::string_view expected) {
  if (!object.is_object()) {
    return Status::Invalid(where + ": expected a JSON object with \"format\": \"" +
                           std::string(expected) + "\", got " + Describe(object));
  }
  const auto it = object.find("format");
  if (it == object.end()) {
    return Status::Invalid(where + ": missing required field \"format\" (expected \"" +
                           std::string(expected) + "\")");
  }
  if (!it->is_string() || it->get<std::string>() != expected) {
    return Status::Invalid(where + ".format: unsupported format " + Describe(*it) +
                           "; this build reads \"" + std::string(expected) + "\"");
  }
  return Status::Ok();
}

}  // namespace gpipe
