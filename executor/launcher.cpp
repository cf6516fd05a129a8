#include "executor/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <thread>

extern char** environ;

namespace gpipe::executor {
namespace {

std::atomic<int> pending_signal{0};

void RememberSignal(int signal_number) { pending_signal.store(signal_number); }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  std::optional<int> status;  // exit status, or 128 + signal
};

std::string DescribeStatus(int status) {
  if (status > 128) return "was killed by signal " + std::to_string(status - 128) + " (" + strsignal(status - 128) + ")";
  return "exited with status " + std::to_string(status);
}

}  // namespace

std::map<std::string, std::string> EnvironmentMap() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

std::string SelfExecutable() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string("gpipe-plan");
}

namespace {

// Whether nothing listens on or holds loopback's `port` now (0: any free port; `*bound` gets it).
bool BindsOnLoopback(int port, int* bound) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (ok && bound != nullptr) *bound = ntohs(addr.sin_port);
  close(fd);
  return ok;
}

}  // namespace

std::pair<int, int> EphemeralPorts() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768, hi = 60999;  // (Linux's default)
  if (in >> lo >> hi && lo > 0 && lo <= hi) return {lo, hi};
  return {32768, 60999};
}

int FreeLoopbackPort() {
  // Below the range the kernel hands out by itself: rank 0 listens on the port a moment after
  // this check, and meanwhile every outgoing connection and every listener on port 0 (Gloo's
  // pairs, other jobs' ranks) takes a port from that range, so one picked there can be gone
  // by then ("Address already in use": seen with two jobs on one machine).
  const int first = kFirstRendezvousPort, last = EphemeralPorts().first - 1;
  if (last - first >= 100) {
    std::random_device seed;
    std::mt19937 rng(seed());
    const int span = last - first + 1;
    const int start = static_cast<int>(rng() % static_cast<unsigned>(span));
    for (int i = 0; i < std::min(span, 1000); ++i) {
      const int port = first + (start + i) % span;
      if (BindsOnLoopback(port, nullptr)) return port;
    }
  }
  int port = 29500;
  BindsOnLoopback(0, &port);
  return port;
}

std::vector<std::string> RankEnvironment(const LaunchOptions& options, int local_rank) {
  const int per_node = options.world_size / options.nnodes;
  return {"RANK=" + std::to_string(options.node_rank * per_node + local_rank),
          "LOCAL_RANK=" + std::to_string(local_rank),
          "WORLD_SIZE=" + std::to_string(options.world_size),
          "LOCAL_WORLD_SIZE=" + std::to_string(per_node),
          "GROUP_RANK=" + std::to_string(options.node_rank),
          "MASTER_ADDR=" + options.master_addr,
          "MASTER_PORT=" + std::to_string(options.master_port)};
}

namespace {

constexpr const char* kFailureDir = "GPIPE_FAILURE_DIR";

// When each rank noted its own failure (ns since the epoch), by rank; the folder is removed.
std::map<int, int64_t> TakeFailureTimes(const std::string& dir) {
  std::map<int, int64_t> times;
  if (dir.empty()) return times;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::ifstream in(entry.path());
    int64_t ns = 0;
    if (name.rfind("rank-", 0) == 0 && (in >> ns)) times[std::atoi(name.c_str() + 5)] = ns;
    in.close();
    std::filesystem::remove(entry.path(), ec);
  }
  std::filesystem::remove(dir, ec);
  return times;
}

}  // namespace

void RecordRankFailure(int rank) {
  const char* dir = std::getenv(kFailureDir);
  if (dir == nullptr || *dir == '\0') return;
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string path = std::string(dir) + "/rank-" + std::to_string(rank);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return;  // the earliest note stands
  std::ofstream(path) << ns << "\n";
}

int LaunchRanks(const LaunchOptions& options, std::ostream& err) {
  const int per_node = options.world_size / options.nnodes;

  struct sigaction action {};
  action.sa_handler = RememberSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  const pid_t launcher = getpid();

  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      err << "gpipe-plan run: cannot write the ranks' log " << options.log_path << ": " << std::strerror(errno) << "\n";
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      return 1;
    }
  }
  // Where the ranks note when they failed (RecordRankFailure).
  char failure_template[] = "/tmp/gpipe-failures-XXXXXX";
  const char* made = mkdtemp(failure_template);
  const std::string failure_dir = made != nullptr ? made : "";
  std::vector<Child> children;
  for (int local = 0; local < per_node; ++local) {
    // Build everything the child needs before fork: only async-signal-safe calls after it.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      if (name == "RANK" || name == "LOCAL_RANK" || name == "WORLD_SIZE" || name == "LOCAL_WORLD_SIZE" ||
          name == "GROUP_RANK" || name == "MASTER_ADDR" || name == "MASTER_PORT" || name == kFailureDir) {
        continue;
      }
      env_strings.push_back(entry);
    }
    for (std::string& e : RankEnvironment(options, local)) env_strings.push_back(std::move(e));
    if (!failure_dir.empty()) env_strings.push_back(std::string(kFailureDir) + "=" + failure_dir);
    std::vector<char*> envp, argv;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = options.argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher) _exit(127);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      if (log_fd >= 0 && (dup2(log_fd, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0)) _exit(127);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (pid < 0) {
      err << "gpipe-plan run: could not start rank " << options.node_rank * per_node + local << ": "
          << std::strerror(errno) << "\n";
      for (Child& c : children) kill(c.pid, SIGKILL);
      for (Child& c : children) waitpid(c.pid, nullptr, 0);
      if (log_fd >= 0) close(log_fd);
      TakeFailureTimes(failure_dir);
      return 1;
    }
    children.push_back({options.node_rank * per_node + local, pid, true, std::nullopt});
  }
  if (log_fd >= 0) close(log_fd);  // the ranks hold their own copies

  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> stop_since;
  bool terminated = false, killed = false;
  std::optional<int> first_failure;
  int running = static_cast<int>(children.size());
  while (running > 0) {
    if (const int s = pending_signal.exchange(0); s != 0) {
      err << "gpipe-plan run: " << strsignal(s) << "; stopping every rank\n";
      for (Child& c : children) {
        if (c.running) kill(c.pid, SIGTERM);
      }
      if (!stop_since) stop_since = Clock::now();
      terminated = true;
    }
    int wstatus = 0;
    const pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid > 0) {
      for (Child& c : children) {
        if (c.pid != pid) continue;
        c.running = false;
        --running;
        c.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
        if (*c.status != 0 && !first_failure) {
          first_failure = c.rank;
          stop_since = Clock::now();
        }
      }
      continue;
    }
    if (stop_since) {
      const auto waited = Clock::now() - *stop_since;
      if (!terminated && waited > options.grace) {
        for (Child& c : children) {
          if (c.running) kill(c.pid, SIGTERM);
        }
        terminated = true;
        stop_since = Clock::now();
      } else if (terminated && !killed && waited > options.grace) {
        for (Child& c : children) {
          if (c.running) kill(c.pid, SIGKILL);
        }
        killed = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  // The rank whose own error came first caused the others' (they only lost a connection).
  const std::map<int, int64_t> noted = TakeFailureTimes(failure_dir);
  for (const Child& c : children) {
    auto t = noted.find(c.rank);
    if (t == noted.end() || c.status.value_or(0) == 0) continue;
    auto best = first_failure ? noted.find(*first_failure) : noted.end();
    if (best == noted.end() || t->second < best->second) first_failure = c.rank;
  }
  int result = 0;
  for (const Child& c : children) {
    if (c.status.value_or(0) == 0) continue;
    err << "gpipe-plan run: rank " << c.rank << " " << DescribeStatus(*c.status)
        << (first_failure && *first_failure == c.rank ? " (first to fail)" : " (stopped after another rank failed)")
        << "\n";
    if (first_failure && *first_failure == c.rank) result = *c.status;
  }
  if (result == 0 && terminated) result = 130;
  return result;
}

}  // namespace gpipe::executor
