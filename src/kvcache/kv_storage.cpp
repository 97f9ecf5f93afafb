#include "kvcache/kv_storage.h"

#include <cstring>
#include <new>
#include <string>

#include "util/huge_pages.h"

namespace kvserve {

Expected<KvStorage> KvStorage::create(const KvLayout& layout, int32_t num_blocks) {
  KVS_RETURN_IF_ERROR(layout.validate());
  if (num_blocks <= 0)
    return invalid_argument("KV storage needs num_blocks > 0, got " + std::to_string(num_blocks));
  size_t total = 0;
  if (__builtin_mul_overflow(layout.block_bytes(), size_t(num_blocks), &total))
    return invalid_argument("KV storage size overflows");
  // Aligned operator new (not mmap) so ASan sees overruns by attention kernels in tests; the
  // zero fill also commits every page now, so an oversized budget fails here, not mid-request.
  // Arenas of 2 MiB or more are on huge pages (util/huge_pages.h): attention walks a sequence's
  // blocks scattered over the whole arena, one 4 KiB page per K or V tile, and with 4 KiB pages
  // every tile is a TLB miss.
  const size_t align = huge_page_alignment(total, kAlignment);
  const size_t alloc_bytes = round_up_to(total, align);
  void* p = ::operator new(alloc_bytes, std::align_val_t(align), std::nothrow);
  if (p == nullptr) return out_of_memory("cannot allocate " + std::to_string(total) + " bytes of KV storage");
  advise_huge_pages(p, alloc_bytes, align);
  std::memset(p, 0, alloc_bytes);
  return KvStorage(layout, num_blocks, static_cast<uint8_t*>(p), total, align);
}

KvStorage::KvStorage(KvStorage&& other) noexcept
    : layout_(other.layout_),
      num_blocks_(other.num_blocks_),
      data_(other.data_),
      total_bytes_(other.total_bytes_),
      alignment_(other.alignment_) {
  other.data_ = nullptr;
  other.num_blocks_ = 0;
  other.total_bytes_ = 0;
}

KvStorage& KvStorage::operator=(KvStorage&& other) noexcept {
  if (this != &other) {
    release_memory();
    layout_ = other.layout_;
    num_blocks_ = other.num_blocks_;
    data_ = other.data_;
    total_bytes_ = other.total_bytes_;
    alignment_ = other.alignment_;
    other.data_ = nullptr;
    other.num_blocks_ = 0;
    other.total_bytes_ = 0;
  }
  return *this;
}

KvStorage::~KvStorage() { release_memory(); }

void KvStorage::release_memory() {
  if (data_ != nullptr) ::operator delete(data_, std::align_val_t(alignment_));
  data_ = nullptr;
}

size_t KvStorage::plane_offset(int32_t block, int layer, KvPart part) const {
  KVS_ASSERT(block >= 0 && block < num_blocks_, "KV block id out of range");
  KVS_ASSERT(layer >= 0 && layer < layout_.num_layers, "KV layer out of range");
  return (size_t(layer) * size_t(num_blocks_) + size_t(block)) * layout_.layer_block_bytes() +
         layout_.part_offset(part);
}

}  // namespace kvserve
