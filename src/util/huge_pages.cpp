#include "util/huge_pages.h"

#include <sys/mman.h>

namespace kvserve {

void advise_huge_pages(void* p, size_t bytes, size_t align) {
  if (align == kHugePageBytes) (void)madvise(p, bytes, MADV_HUGEPAGE);
}

}  // namespace kvserve
