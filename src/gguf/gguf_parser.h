// Internal: fills a GgufFile from its mmapped bytes, validating the layout documented in
// gguf_file.h. Used only by GgufFile::open (it is a friend, so it writes the private fields).
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf_byte_reader.h"
#include "gguf/gguf_file.h"
#include "util/status.h"

namespace kvserve {

class GgufParser {
 public:
  explicit GgufParser(GgufFile& file);
  Status parse();

 private:
  Status parse_header(uint64_t* n_tensors, uint64_t* n_kv);
  Status parse_metadata(uint64_t n_kv);
  Status parse_value(GgufValueType type, const std::string& what, int depth, GgufValue* out);
  Status parse_array(const std::string& what, int depth, GgufValue* out);
  Status parse_string(const std::string& what, uint64_t elem, std::string* out);
  Status apply_alignment();
  Status parse_tensor_infos(uint64_t n_tensors);
  Status parse_tensor_info(uint64_t index, GgufTensorInfo* out);
  Status place_tensor_data();

  // "<path>: truncated while reading <what> (need N bytes at offset P, file size S)".
  Status truncated(const std::string& what, uint64_t need) const;
  // "<path>: <msg>" with code kCorrupt.
  Status bad(const std::string& msg) const;
  // Bounds a count read from the file before anything is reserved for it. A count whose
  // items (at least `min_size` bytes each) fit in the rest of the file passes with
  // *reserve = count. One that cannot fit but is no larger than the bytes left is taken as a
  // truncated file: it passes with *reserve capped to what fits, so parsing goes on and
  // fails at the exact field where the bytes run out. A larger count is corrupt: an error.
  Status check_count(const std::string& what, uint64_t count, uint64_t min_size, uint64_t* reserve) const;

  GgufFile& file_;
  const std::string& path_;
  GgufByteReader in_;
};

}  // namespace kvserve
