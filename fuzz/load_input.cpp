#include "fuzz/load_input.h"

#include <array>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/json_reader.h"
#include "core/model.h"
#include "core/plan.h"
#include "core/profile.h"
#include "core/run_record.h"

namespace gpipe::fuzz {
namespace {

constexpr const char* kWhere = "input.json";

constexpr std::array<std::pair<InputFormat, const char*>, 5> kNames = {{
    {InputFormat::kProfile, "profile"},
    {InputFormat::kCluster, "cluster"},
    {InputFormat::kPlan, "plan"},
    {InputFormat::kModel, "model"},
    {InputFormat::kRunRecord, "run-record"},
}};

// A loaded value written back by `write`, or the loader's error.
template <typename T, typename Write>
Expected<nlohmann::json> WrittenBack(const Expected<T>& value, Write write) {
  if (!value.ok()) return value.status();
  return write(*value);
}

// The parsed value written back by its writer, or the loader's error.
Expected<nlohmann::json> ReadAndWrite(InputFormat format, const nlohmann::json& json, const std::string& where,
                                      const std::string& base_dir) {
  switch (format) {
    case InputFormat::kProfile: return WrittenBack(ProfileFromJson(json, where), ProfileToJson);
    case InputFormat::kCluster: return WrittenBack(ClusterFromJson(json, where), ClusterToJson);
    case InputFormat::kPlan: return WrittenBack(PlanFromJson(json, where, base_dir), PlanToJson);
    case InputFormat::kModel: return WrittenBack(ModelFromJson(json, where, base_dir), ModelToJson);
    case InputFormat::kRunRecord: return WrittenBack(RunRecordFromJson(json, where), RunRecordToJson);
  }
  return Status::Invalid("unknown format");
}

// Why `status` is not a proper rejection of a file named `where`, or "".
std::string CheckRejection(const Status& status, const std::string& where) {
  const std::string& message = status.message();
  if (message.find_first_of("\n\r") != std::string::npos) return "the error is not one line: " + message;
  if (message.rfind(where + ":", 0) != 0 && message.rfind(where + ".", 0) != 0) {
    return "the error does not start with the file's name: " + message;
  }
  if (message.size() <= where.size() + 2) return "the error says nothing: " + message;
  return "";
}

}  // namespace

const char* FormatName(InputFormat format) {
  for (const auto& [value, name] : kNames) {
    if (value == format) return name;
  }
  return "?";
}

std::optional<InputFormat> FormatFromName(std::string_view name) {
  for (const auto& [value, text] : kNames) {
    if (name == text) return value;
  }
  return std::nullopt;
}

LoadOutcome LoadInput(InputFormat format, std::string_view bytes, const std::string& base_dir) {
  LoadOutcome outcome;
  Expected<nlohmann::json> json = ParseJson(bytes, kWhere);
  Expected<nlohmann::json> written = json.ok() ? ReadAndWrite(format, *json, kWhere, base_dir) : json.status();
  if (!written.ok()) {
    outcome.status = written.status();
    outcome.violation = CheckRejection(outcome.status, kWhere);
    return outcome;
  }
  // Accepted: what the writer wrote must load back (through text, as a file would) and write the
  // same again.
  Expected<nlohmann::json> reread = ParseJson(written->dump(1), "written.json");
  Expected<nlohmann::json> rewritten =
      reread.ok() ? ReadAndWrite(format, *reread, "written.json", base_dir) : reread.status();
  if (!rewritten.ok()) {
    outcome.violation = "accepted, but the file its writer wrote does not load: " + rewritten.status().message();
  } else if (*rewritten != *written) {
    outcome.violation = "accepted, but its rewritten file differs: " + written->dump() + " then " + rewritten->dump();
  }
  return outcome;
}

}  // namespace gpipe::fuzz
