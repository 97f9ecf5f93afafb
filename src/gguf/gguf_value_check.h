// Internal: the writer's check that a GgufValue can be encoded as its declared type.
#pragma once

#include <string>

#include "gguf/gguf_file.h"

namespace kvserve {

// "" when `v` is encodable; otherwise what is wrong, phrased to follow a key name
// ("value 300 does not fit uint8"). `depth` counts enclosing arrays.
std::string check_gguf_value(const GgufValue& v, int depth = 0);

}  // namespace kvserve
