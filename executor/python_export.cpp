#include "executor/python_export.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "executor/export_model_source.h"  // generated: kExportModelSource

extern char** environ;

namespace gpipe::executor {
namespace {

// FNV-1a, 64 bits: a cache key, not a defence against anyone.
uint64_t Fnv1a(const std::string& text, uint64_t hash = 1469598103934665603ull) {
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::string CacheDir() {
  if (const std::string dir = Env("GPIPE_CACHE_DIR"); !dir.empty()) return dir;
  if (const std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/gpipe-plan";
  if (const std::string home = Env("HOME"); !home.empty()) return home + "/.cache/gpipe-plan";
  return "/tmp/gpipe-plan-cache";
}

Expected<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Invalid("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string InputJson(const ModelInput& input) {
  nlohmann::json j;
  if (input.kind == InputKind::kTokens) {
    j = {{"kind", "tokens"}, {"vocab", input.vocab}, {"seq_len", input.seq_len}};
  } else {
    j = {{"kind", "images"}, {"channels", input.channels}, {"height", input.height}, {"width", input.width},
         {"classes", input.classes}};
  }
  return j.dump();
}

// Runs argv, its stderr into `err_path`; the exit status, or an error when it could not start.
Expected<int> Spawn(const std::vector<std::string>& args, const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int started = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (started != 0) {
    return Status::Invalid("cannot start " + args[0] + " (" + std::strerror(started) +
                           "); install Python 3 with torch, or name the interpreter in GPIPE_PYTHON");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::Invalid(std::string("waiting for the exporter: ") + std::strerror(errno));
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// The last non-empty line of `text` that the exporter wrote for people ("gpipe-export: ..."), or
// the last line at all (an interpreter that died before the exporter ran), without the
// "source:function: " it starts with (`what`), which the caller names already.
std::string ErrorLine(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string line, mine, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.rfind("gpipe-export: ", 0) == 0) mine = line.substr(14);
  }
  if (mine.rfind(what + ": ", 0) == 0) mine = mine.substr(what.size() + 2);
  return !mine.empty() ? mine : (last.empty() ? "no message" : last);
}

}  // namespace

const std::string& ExporterSource() {
  static const std::string source = kExportModelSource;
  return source;
}

Status ExportPythonModel(ModelSpec* model) {
  if (model->python_path.empty()) return Status::Ok();
  const std::string what = model->python_path + ":" + model->python_function;
  Expected<std::string> source = ReadFile(model->python_path);
  if (!source.ok()) return Status::Invalid("model " + model->name + ": " + source.status().message());
  const std::string input = InputJson(model->input);
  const std::string python = Env("GPIPE_PYTHON").empty() ? "python3" : Env("GPIPE_PYTHON");
  uint64_t key = Fnv1a(ExporterSource());
  for (const std::string& part : {*source, model->python_function, input, std::to_string(model->seed), python}) {
    key = Fnv1a(part, key ^ 0x9e3779b97f4a7c15ull);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
  const std::string dir = CacheDir();
  const std::string stem = std::filesystem::path(model->python_path).stem().string();
  const std::string out = dir + "/" + stem + "-" + model->python_function + "-" + hex + ".pt";
  std::error_code ec;
  if (std::filesystem::is_regular_file(out, ec)) {
    model->torchscript_path = out;
    return Status::Ok();
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Invalid("model " + model->name + ": cannot make the cache folder " + dir + ": " + ec.message());
  // Written under a name of this process, then renamed: commands that export the same model at
  // once (parallel tests, two launchers) never see each other's half-written file.
  const std::string mine = out + "." + std::to_string(getpid());
  const std::string err_path = mine + ".stderr";
  Expected<int> code = Spawn({python, "-c", ExporterSource(), "--source", model->python_path, "--function",
                              model->python_function, "--out", mine, "--input", input, "--seed",
                              std::to_string(model->seed)},
                             err_path);
  if (!code.ok()) return Status::Invalid("model " + model->name + " (" + what + "): " + code.status().message());
  Expected<std::string> err_text = ReadFile(err_path);
  std::remove(err_path.c_str());
  if (*code != 0 || !std::filesystem::is_regular_file(mine, ec)) {
    std::remove(mine.c_str());
    return Status::Invalid("model " + model->name + " (" + what + "): " +
                           ErrorLine(err_text.ok() ? *err_text : std::string(), what) +
                           (*code == 0 ? " (the exporter wrote no file)" : ""));
  }
  std::filesystem::rename(mine, out, ec);
  if (ec) return Status::Invalid("model " + model->name + ": cannot move the exported file to " + out + ": " + ec.message());
  model->torchscript_path = out;
  return Status::Ok();
}

}  // namespace gpipe::executor
