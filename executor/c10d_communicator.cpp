#include "executor/c10d_communicator.h"

#include "core/schedule/wire.h"
#include "executor/exception_text.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef GPIPE_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace gpipe::executor {
namespace {

class C10dWork final : public PendingWork {
 public:
  // `timeout` zero: wait() without one, which on NCCL makes the current stream wait (c10d's
  // timed wait would poll the host in 1 ms sleeps); NCCL's watchdog enforces the group's timeout.
  C10dWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::chrono::milliseconds timeout)
      : work_(std::move(work)), what_(std::move(what)), timeout_(timeout) {}
  // c10d's work may be waited for once; later waits return at once.
  void Wait() override {
    if (waited_) return;
    try {
      if (!work_->wait(timeout_) && timeout_ != ::kNoTimeout) throw std::runtime_error("timed out");
    } catch (const std::exception& e) {
      throw std::runtime_error(what_ + " failed: " + ExceptionText(e));
    }
    waited_ = true;
  }
  bool Done() override { return waited_ || work_->isCompleted(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::chrono::milliseconds timeout_;
  bool waited_ = false;
};

class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<c10d::Store> store, const RendezvousOptions& options)
      : store_(std::move(store)), options_(options) {
    world_ = MakeGroup(store_, options.rank, options.world_size);
    to_higher_ = MakeGroup(c10::make_intrusive<c10d::PrefixStore>("to-higher", store_), options.rank, options.world_size);
    to_lower_ = MakeGroup(c10::make_intrusive<c10d::PrefixStore>("to-lower", store_), options.rank, options.world_size);
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.world_size; }
  std::string backend() const override { return options_.nccl ? "nccl" : "gloo"; }

  std::unique_ptr<PendingWork> Send(const torch::Tensor& tensor, int peer, int tag) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::Backend& group = Lane(peer > options_.rank);
    return Wrap([&] { return group.send(tensors, peer, tag); }, "send of the " + TagToText(tag) + " to rank " + std::to_string(peer));
  }
  std::unique_ptr<PendingWork> Recv(const torch::Tensor& into, int peer, int tag) override {
    std::vector<at::Tensor> tensors{into};
    c10d::Backend& group = Lane(peer < options_.rank);
    return Wrap([&] { return group.recv(tensors, peer, tag); },
                "receive of the " + TagToText(tag) + " from rank " + std::to_string(peer));
  }
  void AllReduceSum(torch::Tensor& tensor, const std::vector<int>& group) override {
    c10d::Backend& backend = GroupOf(group);
    std::vector<at::Tensor> tensors{tensor};
    Wrap([&] { return backend.allreduce(tensors); }, "sum over ranks " + c10::str(group))->Wait();
  }
  void ReduceScatterSum(const torch::Tensor& input, torch::Tensor& output, const std::vector<int>& group) override {
    c10d::Backend& backend = GroupOf(group);
    at::Tensor in = input, out = output;
    Wrap([&] { return backend._reduce_scatter_base(out, in); }, "reduce-scatter over ranks " + c10::str(group))->Wait();
  }
  void AllGather(const torch::Tensor& input, torch::Tensor& output, const std::vector<int>& group) override {
    c10d::Backend& backend = GroupOf(group);
    at::Tensor in = input, out = output;
    Wrap([&] { return backend._allgather_base(out, in); }, "all-gather over ranks " + c10::str(group))->Wait();
  }
  void Barrier() override {
    c10d::BarrierOptions barrier;
    // On the bound GPU: left alone, NCCL's barrier guesses a device from the rank.
    if (options_.nccl) barrier.device_ids = {options_.device_index};
    std::unique_ptr<PendingWork> work = Wrap([&] { return world_->barrier(barrier); }, "barrier");
    work->Wait();
  }
  std::vector<std::string> GatherToRankZero(const std::string& mine) override {
    const std::string round = "gather/" + std::to_string(gathers_++) + "/";
    store_->set(round + std::to_string(options_.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<std::string> all;
    if (options_.rank != 0) return all;
    for (int r = 0; r < options_.world_size; ++r) {
      const std::string key = round + std::to_string(r);
      try {
        store_->wait({key}, options_.timeout);
      } catch (const std::exception& e) {
        throw std::runtime_error("rank 0 waited for rank " + std::to_string(r) + "'s record in vain: " + ExceptionText(e));
      }
      const std::vector<uint8_t> bytes = store_->get(key);
      all.emplace_back(bytes.begin(), bytes.end());
    }
    return all;
  }

 private:
  // The backend of `group` (sorted global ranks, this one among them), made at its first use.
  c10d::Backend& GroupOf(const std::vector<int>& group) {
    c10::intrusive_ptr<c10d::Backend>& backend = groups_[group];
    if (!backend) {
      std::string name = "group";
      int index = 0;
      for (size_t i = 0; i < group.size(); ++i) {
        name += "-" + std::to_string(group[i]);
        if (group[i] == options_.rank) index = static_cast<int>(i);
      }
      backend = MakeGroup(c10::make_intrusive<c10d::PrefixStore>(name, store_), index, static_cast<int>(group.size()));
    }
    return *backend;
  }
  // A message to a higher rank travels in one group, to a lower rank in the other. NCCL needs
  // this (see the header). Gloo matches by tag and would work with one, but its TCP pair has one
  // lock per connection that the sender's thread and the wire's own thread both take: with both
  // directions on one connection, a rank's sends and posted receives wait while that thread reads
  // the peer's messages, and the thread spins while they hold it. One connection per direction
  // made the main job (tiny GPT, K=2, M=64) 20% faster on 2 CPU cores (docs/executor.md).
  c10d::Backend& Lane(bool to_higher) { return to_higher ? *to_higher_ : *to_lower_; }

  template <typename Start>
  std::unique_ptr<PendingWork> Wrap(Start start, const std::string& what) {
    try {
      return std::make_unique<C10dWork>(start(), "rank " + std::to_string(options_.rank) + ": " + what,
                                        options_.nccl ? ::kNoTimeout : options_.timeout);
    } catch (const std::exception& e) {
      throw std::runtime_error("rank " + std::to_string(options_.rank) + ": " + what + " failed: " + ExceptionText(e));
    }
  }

  c10::intrusive_ptr<c10d::Backend> MakeGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size) {
#ifdef GPIPE_WITH_NCCL
    if (options_.nccl) {
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      // Past the run's own deadline (ActionClock::EndStep), so that its error is the one printed.
      nccl_options->timeout = options_.timeout + std::chrono::seconds(60);
      return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, nccl_options);
    }
#endif
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options_.timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && *ifname != '\0') {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else {
      // Loopback jobs stay on loopback; others use the address this host resolves to.
      const bool loopback = options_.master_addr == "127.0.0.1" || options_.master_addr == "localhost";
      gloo_options->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                               : c10d::ProcessGroupGloo::createDefaultDevice());
    }
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo_options);
  }

  c10::intrusive_ptr<c10d::Store> store_;
  RendezvousOptions options_;
  c10::intrusive_ptr<c10d::Backend> world_;
  c10::intrusive_ptr<c10d::Backend> to_higher_, to_lower_;
  std::map<std::vector<int>, c10::intrusive_ptr<c10d::Backend>> groups_;
  int gathers_ = 0;
};

bool IsLoopback(const std::string& address) {
  return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
}

// The store's listening socket, bound to a loopback master_addr itself: c10d's own server binds
// every interface whatever the address, so a loopback job would be reachable from the network.
Expected<int> ListenOn(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int error = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &found); error != 0) {
    return Status::Invalid("cannot resolve the rendezvous address " + address + ": " + ::gai_strerror(error));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 2048) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return Status::Invalid("cannot listen on " + address + ":" + service + ": " + why +
                         " (is the port taken? give another with --master-port)");
}

}  // namespace

bool NcclCompiledIn() {
#ifdef GPIPE_WITH_NCCL
  return true;
#else
  return false;
#endif
}

RendezvousOptions RendezvousFor(int rank, int world_size, const std::string& master_addr, int master_port,
                                std::chrono::milliseconds timeout, bool nccl) {
  RendezvousOptions options;
  options.master_addr = master_addr;
  options.master_port = master_port;
  options.rank = rank;
  options.world_size = world_size;
  options.timeout = timeout;
  options.nccl = nccl;
  return options;
}

Expected<std::unique_ptr<Communicator>> ConnectC10d(const RendezvousOptions& options) {
  if (options.nccl && !NcclCompiledIn()) {
    return Status::Invalid("NCCL was asked for, but this build has no CUDA LibTorch; use --device cpu (Gloo)");
  }
  const std::string where = options.master_addr + ":" + std::to_string(options.master_port);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(options.master_port);
    store_options.isServer = options.rank == 0;
    store_options.numWorkers = options.world_size;
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    // Another address is left to c10d (every interface): a host name may resolve to a loopback
    // address on rank 0's own machine and to its real one elsewhere; `run` warns of it.
    if (store_options.isServer && IsLoopback(options.master_addr)) {
      Expected<int> fd = ListenOn(options.master_addr, options.master_port);
      if (!fd.ok()) return Status::Invalid("rank 0: " + fd.status().message());
      store_options.masterListenFd = *fd;
    }
    auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
    return std::unique_ptr<Communicator>(std::make_unique<C10dCommunicator>(store, options));
  } catch (const std::exception& e) {
    return Status::Invalid("rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size) +
                           ": could not join the job at " + where + " within " +
                           std::to_string(options.timeout.count() / 1000) + " s: " + ExceptionText(e) +
                           " (is every rank started, with the same MASTER_ADDR/MASTER_PORT, and the port free?)");
  }
}

}  // namespace gpipe::executor
