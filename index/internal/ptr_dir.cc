#include "index/internal/ptr_dir.h"

#include <sys/mman.h>

#include <cstdlib>

namespace kvidx::internal {

void* MapZeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  return p;
}

void Unmap(void* p, size_t bytes) { munmap(p, bytes); }

}  // namespace kvidx::internal
