// Reading JSON input with errors that help: every failure names the file, the field path and the
// bad value. An ObjectReader keeps the first error it meets; later reads return harmless defaults,
// so a loader reads all its fields straight down and checks status() once at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gpipe {

/// Parses the JSON file at `path`; errors name the file and the line and column.
Expected<nlohmann::json> LoadJsonFile(const std::string& path);
/// Parses JSON text; errors name `where` and the line and column. LoadJsonFile's second half.
Expected<nlohmann::json> ParseJson(std::string_view text, const std::string& where);

/// A short rendering of a JSON value for error messages, on one line (long values are cut).
std::string Describe(const nlohmann::json& value);
/// `text` in double quotes with JSON escapes, cut like Describe: a user's string in an error line.
std::string Quote(std::string_view text);

/// Reads the fields of one JSON object. `where` is the path printed in errors, e.g.
/// "model.json: layers[3]".
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& object, std::string where);

  /// Ok, or the first error met so far.
  const Status& status() const { return status_; }
  /// The path of field `key`, as printed in errors.
  std::string Where(std::string_view key) const;
  bool Has(std::string_view key) const;

  /// A finite number >= `min`; required.
  double Number(std::string_view key, double min);
  /// A finite number > `bound`; required.
  double NumberAbove(std::string_view key, double bound);
  /// A finite number >= `min`, or nullopt when absent.
  std::optional<double> OptionalNumber(std::string_view key, double min);
  /// A whole number in [min, max]; required.
  int64_t Integer(std::string_view key, int64_t min, int64_t max = INT64_MAX);
  /// A whole number in [min, max], or `fallback` when absent.
  int64_t OptionalInteger(std::string_view key, int64_t min, int64_t max, int64_t fallback);
  /// A byte count: a non-negative number, rounded to the nearest byte; required.
  int64_t Bytes(std::string_view key);
  int64_t OptionalBytes(std::string_view key, int64_t fallback);
  /// A non-empty string; required.
  std::string String(std::string_view key);
  std::string OptionalString(std::string_view key, std::string fallback);
  bool OptionalBool(std::string_view key, bool fallback);
  /// The member `key`, which must be an object (or, for Array, an array); nullptr on error.
  const nlohmann::json* Object(std::string_view key);
  const nlohmann::json* Array(std::string_view key);
  const nlohmann::json* OptionalObject(std::string_view key);
  /// The raw member, or nullptr when absent.
  const nlohmann::json* Raw(std::string_view key) const;
  /// "; is \"x\" a misspelling of it?" when the object has a key close to the missing `key`
  /// (and not one of the known fields); "" otherwise.
  std::string MisspeltHint(std::string_view key) const;

  /// The object's fields, when known: a missing required field is then never said to be a
  /// misspelling of another of them ("link" of "links"). `known` must outlive the reader.
  void SetKnownFields(const std::set<std::string>& known) { known_ = &known; }

  /// Records `message` (prefixed with the field's path) unless an error is already recorded.
  void Fail(std::string_view key, const std::string& message);
  void Fail(const Status& status);

 private:
  const nlohmann::json* Require(std::string_view key);
  std::optional<double> ReadNumber(std::string_view key, double min, bool exclusive, bool required);

  const nlohmann::json& object_;
  std::string where_;
  Status status_;
  const std::set<std::string>* known_ = nullptr;
};

/// The members of `object` whose keys are not in `known`: kept so that a rewritten file loses
/// nothing this build does not interpret.
nlohmann::json UnknownFields(const nlohmann::json& object, const std::set<std::string>& known);

/// Loads the JSON file at `path` and converts it with `parse(json, path)`.
template <typename T>
Expected<T> LoadJsonAs(const std::string& path, Expected<T> (*parse)(const nlohmann::json&, const std::string&)) {
  Expected<nlohmann::json> json = LoadJsonFile(path);
  if (!json.ok()) return json.status();
  return parse(*json, path);
}

/// Checks `object["format"] == expected`; the error says which formats this build reads.
Status CheckFormat(const nlohmann::json& object, const std::string& where, std::string_view expected);

}  // namespace gpipe
