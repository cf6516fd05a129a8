// Host memory for training on CPUs: glibc's malloc returns each large block (above a threshold that
// starts at 128 KiB) to the system when freed, so every micro-batch's activations come back as
// fresh pages, zeroed by the kernel on first touch. Measured on the 2-core machine (K=1, M=1 tiny
// GPT, 3 interleaved runs of 9 steps each): 132-166 ms per step with steps from 125 to 194 ms, and
// 123-127 ms with steps from 115 to 139 ms once freed memory is kept (docs/compare.md). Ranks and
// the profiler keep it, as PyTorch's caching allocator does on GPUs.
#pragma once

namespace gpipe::executor {

/// Keeps freed host memory in the process for reuse: blocks up to 32 MiB come from the heap, and
/// the heap is not trimmed below 1 GiB of free space. Call once, before training or profiling.
void KeepFreedHostMemory();

}  // namespace gpipe::executor
