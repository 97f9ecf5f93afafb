#include "util/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvserve {

MmapFile::~MmapFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

MmapFile::MmapFile(MmapFile&& o) noexcept : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MmapFile& MmapFile::operator=(MmapFile&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Expected<MmapFile> MmapFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    std::string msg = path + ": cannot open: " + std::strerror(e);
    return e == ENOENT ? not_found(msg) : io_error(msg);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    std::string msg = path + ": cannot stat: " + std::strerror(errno);
    ::close(fd);
    return io_error(msg);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  MmapFile f;
  f.path_ = path;
  f.size_ = size_t(st.st_size);
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string msg = path + ": cannot mmap: " + std::strerror(errno);
      ::close(fd);
      return io_error(msg);
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

void MmapFile::release_pages() const {
  if (data_ != nullptr) (void)madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
}

}  // namespace kvserve
