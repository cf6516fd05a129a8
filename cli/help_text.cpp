#include "cli/help_text.h"

#include <string>

namespace gpipe::cli {
namespace {

// "INT in [1 - 1024]" -> "1 to 1024"; "{cpu,cuda}" -> "one of cpu, cuda"; others as they are.
std::string InWords(const std::string& description) {
  const size_t open = description.find(" in [");
  if (open != std::string::npos) {
    const std::string range = description.substr(open + 5, description.size() - open - 6);
    const size_t dash = range.find(" - ");
    if (dash == std::string::npos) return description;
    const std::string low = range.substr(0, dash), high = range.substr(dash + 3);
    // Bounds far beyond any sensible value are guards against overflow, not advice.
    if (high.size() >= 7) return "at least " + low;
    return low + " to " + high;
  }
  if (description.size() > 2 && description.front() == '{' && description.back() == '}') {
    std::string choices = description.substr(1, description.size() - 2);
    for (size_t at = choices.find(','); at != std::string::npos; at = choices.find(',', at + 2)) {
      choices.replace(at, 1, ", ");
    }
    return "one of " + choices;
  }
  return description;
}

std::string ValueName(const std::string& type_name) {
  const std::string base = type_name.substr(0, type_name.find(':'));
  if (base == "INT" || base == "UINT") return "N";
  if (base == "FLOAT") return "NUMBER";
  return base.empty() ? base : "TEXT";
}

}  // namespace

void TidyHelp(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size() == 0) continue;  // a flag: no value, no default to show
    std::string description = option->get_description();
    std::string words;
    for (int i = 0;; ++i) {
      CLI::Validator* check = nullptr;
      try {
        check = option->get_validator(i);
      } catch (const CLI::OptionNotFound&) {
        break;
      }
      const std::string said = check->get_description();
      if (said.empty()) continue;
      words += (words.empty() ? "" : "; ") + InWords(said);
      check->description("");
    }
    option->type_name(ValueName(option->get_type_name()));
    if (!words.empty()) description += " (" + words + ")";
    if (!option->get_required()) {
      option->capture_default_str();
      std::string value = option->get_default_str();
      if (value.size() >= 2 && value.front() == '[' && value.back() == ']') value = value.substr(1, value.size() - 2);
      if (!value.empty() && description.find("default") == std::string::npos) {
        description += " [default: " + value + "]";
      }
      option->default_str("");
    }
    option->description(description);
  }
}

}  // namespace gpipe::cli
