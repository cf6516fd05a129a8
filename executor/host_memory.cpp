#include "executor/host_memory.h"

#include <malloc.h>

namespace gpipe::executor {

void KeepFreedHostMemory() {
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest glibc allows on 64-bit systems
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace gpipe::executor
