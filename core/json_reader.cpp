#include "core/json_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/files.h"
#include "core/suggest.h"
#include "core/text.h"
#include "core/units.h"

namespace gpipe {

namespace {


// Python's json module writes NaN, Infinity and -Infinity unless told not to; JSON has none of
// them. A hint when the parser stopped on one (it stops a character or two into the word).
std::string NonFiniteHint(std::string_view text, size_t error_byte) {
  const size_t from = error_byte > 3 ? error_byte - 3 : 0;
  for (size_t i = from; i < text.size() && i <= error_byte; ++i) {
    const std::string_view rest = text.substr(i);
    if (rest.substr(0, 3) == "NaN" || rest.substr(0, 8) == "Infinity") {
      return "; JSON has no NaN or Infinity: write a finite number (Python's json.dump writes them "
             "unless given allow_nan=False)";
    }
  }
  return "";
}

// Deeper than this, a file is refused before it is parsed: the formats nest a few levels, and
// copying or printing a value nested a million deep (a 2 MB file) would overflow the stack.
constexpr int kMaxDepth = 256;

// Where `text` first nests deeper than kMaxDepth, as "line L, column C", or "" when it does not.
std::string TooDeep(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) {
        return "line " + std::to_string(line) + ", column " + std::to_string(i - line_start + 1);
      }
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return "";
}

// Appends a compact rendering of `value` to `out`, stopping once `out` is longer than `max`: a
// value nested a million deep or a string of a gigabyte costs no more than a short one.
void Render(const nlohmann::json& value, size_t max, std::string& out) {
  if (out.size() > max) return;
  if (value.is_object() || value.is_array()) {
    const bool object = value.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= max; ++it) {
      if (!first) out += ',';
      first = false;
      if (object) {
        Render(nlohmann::json(it.key()), max, out);
        out += ':';
      }
      Render(*it, max, out);
    }
    if (out.size() <= max) out += object ? '}' : ']';
  } else if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    // Cut first: only the start is shown. A cut inside a UTF-8 character dumps as U+FFFD.
    out += nlohmann::json(text.substr(0, max + 1)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    out += value.dump();
  }
}

bool EndsWith(std::string_view text, std::string_view tail) {
  return text.size() >= tail.size() && text.substr(text.size() - tail.size()) == tail;
}

// For a number field given as a string with a unit ("80GiB", "25 GB/s", "1.5 s"): the number to
// write instead, in the unit the field's name carries.
std::string UnitHint(std::string_view key, const nlohmann::json& value) {
  if (!value.is_string()) return "";
  std::string text = value.get<std::string>();
  while (!text.empty() && text.back() == ' ') text.pop_back();
  std::string unit;
  std::string number;
  if (EndsWith(key, "_bytes") || EndsWith(key, "_bytes_per_s")) {
    if (EndsWith(key, "_per_s")) {
      if (!EndsWith(text, "/s")) return "";
      text.resize(text.size() - 2);
      unit = "bytes per second";
    } else {
      unit = "bytes";
    }
    Expected<int64_t> bytes = ParseBytes(text);
    if (!bytes.ok()) return "";
    number = std::to_string(*bytes);
  } else if (EndsWith(key, "_ms")) {
    char* end = nullptr;
    double ms = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || !std::isfinite(ms) || ms < 0) return "";
    std::string_view suffix(end);
    while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
    if (suffix == "s") {
      ms *= 1e3;
    } else if (suffix == "us") {
      ms *= 1e-3;
    } else if (suffix != "ms" && !suffix.empty()) {
      return "";
    }
    number = Format("%g", ms);
    unit = "milliseconds";
  } else {
    return "";
  }
  return "; the unit is " + unit + ": write " + number;
}

}  // namespace

Expected<nlohmann::json> ParseJson(std::string_view text, const std::string& where) {
  // e.what() reads "[json.exception.parse_error.101] parse error at line 3, column 5: ...": the
  // part after the tag, on one line.
  const auto reason = [](const nlohmann::json::exception& e) {
    std::string what = e.what();
    const auto pos = what.find("] ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    std::replace_if(what.begin(), what.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
    return what;
  };
  if (const std::string at = TooDeep(text); !at.empty()) {
    return Status::Invalid(where + ": arrays and objects nest more than " + std::to_string(kMaxDepth) +
                           " levels deep (at " + at + "); the formats nest a few levels");
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return Status::Invalid(where + ": is empty; expected a JSON object");
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::Invalid(where + ": not valid JSON: " + reason(e) + NonFiniteHint(text, e.byte));
  } catch (const nlohmann::json::exception& e) {
    // The parser throws out_of_range, not parse_error, for a number beyond a double's range (1e400).
    return Status::Invalid(where + ": not valid JSON: " + reason(e) + "; numbers must lie within +-1.8e308");
  }
}

Expected<nlohmann::json> LoadJsonFile(const std::string& path) {
  Expected<std::string> text = ReadTextFile(path, "a JSON file");
  if (!text.ok()) return text.status();
  return ParseJson(*text, path);
}

std::string Describe(const nlohmann::json& value) {
  constexpr size_t kMax = 60;
  std::string text;
  Render(value, kMax, text);
  if (text.size() > kMax) {
    size_t cut = kMax;
    // Never cut a UTF-8 character in two: back up over continuation bytes (10xxxxxx).
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

std::string Quote(std::string_view text) { return Describe(nlohmann::json(std::string(text))); }

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
    status_ = Status::Invalid(where_ + ": missing required field \"" + std::string(key) + "\"" +
                              MisspeltHint(key));
  }
  return value;
}

std::string ObjectReader::MisspeltHint(std::string_view key) const {
  if (!object_.is_object()) return "";
  const std::string wanted(key);
  const int limit = std::max<int>(2, static_cast<int>(wanted.size()) / 3);
  for (const auto& [name, ignored] : object_.items()) {
    const bool a_field = known_ != nullptr && known_->count(name) > 0;
    if (name != wanted && !a_field && EditDistance(name, wanted) <= limit) {
      return "; is " + Quote(name) + " a misspelling of it?";
    }
  }
  return "";
}

std::optional<double> ObjectReader::ReadNumber(std::string_view key, double min, bool exclusive,
                                               bool required) {
  if (!status_.ok()) return std::nullopt;
  const nlohmann::json* value = required ? Require(key) : Raw(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    Fail(key, "expected a number, got " + Describe(*value) + UnitHint(key, *value));
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
  const std::string& text = value->get_ref<const std::string&>();
  // Names, paths and enum values never hold control characters; refusing them here keeps every
  // message that quotes a string on one line.
  const auto control = [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; };
  if (std::any_of(text.begin(), text.end(), control)) {
    Fail(key, "expected a string without control characters (newlines, tabs), got " + Describe(*value));
    return {};
  }
  return text;
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

namespace {

struct KnownFormat {
  std::string_view format;
  std::string_view what;
};
constexpr KnownFormat kKnownFormats[] = {{"gpipe-profile/1", "a profile"},
                                         {"gpipe-cluster/1", "a cluster"},
                                         {"gpipe-plan/1", "a plan"},
                                         {"gpipe-model/1", "a model"},
                                         {"gpipe-run/1", "a run record"}};

std::string_view WhatFormat(std::string_view format) {
  for (const KnownFormat& known : kKnownFormats) {
    if (known.format == format) return known.what;
  }
  return {};
}

}  // namespace

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
    const std::string_view given = it->is_string() ? WhatFormat(it->get_ref<const std::string&>()) : "";
    if (!given.empty()) {
      return Status::Invalid(where + ".format: is " + Describe(*it) + ", " + std::string(given) + ", not " +
                             std::string(WhatFormat(expected)) + " (\"" + std::string(expected) +
                             "\"); is it the wrong file?");
    }
    return Status::Invalid(where + ".format: unsupported format " + Describe(*it) +
                           "; this build reads \"" + std::string(expected) + "\"");
  }
  return Status::Ok();
}

}  // namespace gpipe
