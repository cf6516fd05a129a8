#include "executor/memory_meter.h"

#include <atomic>
#include <mutex>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#ifdef GPIPE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace gpipe::executor {

struct MemoryCounter {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};

  void Add(int64_t bytes) {
    const int64_t now = current.fetch_add(bytes) + bytes;
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
};

namespace {

// The counter this thread's allocations are charged to. Counters are never freed (a process makes
// one per rank), so storage that outlives its meter can still be credited back.
thread_local MemoryCounter* charged_counter = nullptr;

// Each block starts with a header (its size and counter) in front of the data; the data pointer
// is also the DataPtr's context, as c10 expects of CPU storage that may be resized.
struct Header {
  int64_t bytes;
  MemoryCounter* counter;
};
constexpr size_t kHeaderBytes = 64;  // keeps the data 64-byte aligned
static_assert(sizeof(Header) <= kHeaderBytes);

void FreeCounted(void* data) {
  if (data == nullptr) return;
  auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
  if (header->counter != nullptr) header->counter->current.fetch_sub(header->bytes);
  c10::free_cpu(header);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return {nullptr, nullptr, &FreeCounted, c10::Device(c10::DeviceType::CPU)};
    auto* header = static_cast<Header*>(c10::alloc_cpu(bytes + kHeaderBytes));
    header->bytes = static_cast<int64_t>(bytes);
    header->counter = charged_counter;
    if (header->counter != nullptr) header->counter->Add(header->bytes);
    void* data = reinterpret_cast<char*>(header) + kHeaderBytes;
    return {data, data, &FreeCounted, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &FreeCounted; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

void InstallOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingCpuAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
  });
}

}  // namespace

MemoryMeter::MemoryMeter(const torch::Device& device) : device_(device) {
  if (device_.is_cpu()) {
    InstallOnce();
    counter_ = new MemoryCounter();  // never freed: see charged_counter
    charged_counter = counter_;
  }
}

MemoryMeter::~MemoryMeter() {
  if (charged_counter == counter_) charged_counter = nullptr;
}

UnchargedAllocations::UnchargedAllocations() : saved_(charged_counter) { charged_counter = nullptr; }

UnchargedAllocations::~UnchargedAllocations() { charged_counter = saved_; }

int64_t MemoryMeter::CurrentBytes() const {
#ifdef GPIPE_WITH_CUDA
  if (device_.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  }
#endif
  return counter_ ? counter_->current.load() : 0;
}

int64_t MemoryMeter::PeakBytes() const {
#ifdef GPIPE_WITH_CUDA
  if (device_.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  return counter_ ? counter_->peak.load() : 0;
}

int64_t MemoryMeter::ReservedBytes() const {
#ifdef GPIPE_WITH_CUDA
  if (device_.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  }
#endif
  return 0;  // CPU: no caching allocator, nothing reserved beyond what is allocated
}

int64_t MemoryMeter::PeakReservedBytes() const {
#ifdef GPIPE_WITH_CUDA
  if (device_.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  return 0;
}

void MemoryMeter::ResetPeak() {
#ifdef GPIPE_WITH_CUDA
  if (device_.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
    return;
  }
#endif
  if (counter_) counter_->peak.store(counter_->current.load());
}

std::string MemoryMeter::Describe() const {
  if (device_.is_cuda()) {
    return "CUDA caching allocator: bytes allocated to tensors (max_memory_allocated), per rank; reserved bytes "
           "(max_memory_reserved: allocated plus the allocator's cached free blocks) are read separately";
  }
  return "CPU tensor storage allocated by the rank's thread through c10's CPU allocator (a counting wrapper): "
         "weights, gradients, optimizer state, activations kept for backward and message buffers; not "
         "library scratch or the process heap; nothing is reserved beyond it (no caching allocator on CPU)";
}

}  // namespace gpipe::executor
