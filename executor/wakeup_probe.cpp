#include "executor/wakeup_probe.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace gpipe::executor {
namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Quantile(const std::vector<double>& sorted, double q) {
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())))];
}

}  // namespace

Expected<SaturatedWakeup> ProbeSaturatedWakeup(const WakeupProbeSettings& settings) {
  const int spinners = settings.spinners > 0 ? settings.spinners
                                             : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (settings.samples < 4) return Status::Invalid("the wake-up probe needs at least 4 samples, not " + std::to_string(settings.samples));
  int fds[2];
  if (pipe(fds) != 0) return Status::Invalid(std::string("the wake-up probe could not open a pipe: ") + std::strerror(errno));
  std::atomic<bool> stop{false};
  std::atomic<bool> waiting{false};
  std::vector<double> waits;
  waits.reserve(static_cast<size_t>(settings.samples));
  // The reader stands for a rank: it computes an action's worth, then sleeps in read() until its
  // message comes, and records how late it runs again. It has used its share of the cores, so
  // unlike a thread that mostly sleeps, the scheduler does not run it at once.
  std::thread reader([&] {
    volatile double sink = 0;
    while (static_cast<int>(waits.size()) < settings.samples) {
      const double until = NowMs() + settings.interval_ms;
      while (NowMs() < until) {
        for (int i = 0; i < 1000; ++i) sink = sink + i;
      }
      waiting.store(true);
      double sent = 0;
      const ssize_t n = read(fds[0], &sent, sizeof sent);
      if (n != static_cast<ssize_t>(sizeof sent)) break;
      waits.push_back(NowMs() - sent);
    }
    stop = true;
  });
  // The spinners stand for the node's other ranks, computing on every core; the one that sees the
  // reader asleep first sends it its message (its clock).
  std::vector<std::thread> threads;
  for (int s = 0; s < spinners; ++s) {
    threads.emplace_back([&] {
      volatile double sink = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 1000; ++i) sink = sink + i;
        bool expected = true;
        if (!waiting.load(std::memory_order_relaxed) || !waiting.compare_exchange_strong(expected, false)) continue;
        const double now = NowMs();
        if (write(fds[1], &now, sizeof now) != static_cast<ssize_t>(sizeof now)) {
          stop = true;
          break;
        }
      }
    });
  }
  // The spinners stop when the reader has its samples or a write failed; closing the pipe's end
  // then wakes a reader still waiting for a message that will not come.
  for (std::thread& t : threads) t.join();
  close(fds[1]);
  reader.join();
  close(fds[0]);
  if (static_cast<int>(waits.size()) < settings.samples) {
    return Status::Invalid("the wake-up probe timed " + std::to_string(waits.size()) + " of " +
                           std::to_string(settings.samples) + " wake-ups (a write to its pipe failed)");
  }
  std::sort(waits.begin(), waits.end());
  SaturatedWakeup result;
  result.samples = static_cast<int>(waits.size());
  result.mean_ms = std::accumulate(waits.begin(), waits.end(), 0.0) / static_cast<double>(waits.size());
  result.median_ms = Quantile(waits, 0.5);
  result.spread_ms = (Quantile(waits, 0.75) - Quantile(waits, 0.25)) / 2;
  result.p90_ms = Quantile(waits, 0.9);
  return result;
}

}  // namespace gpipe::executor
