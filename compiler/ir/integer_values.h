#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "compiler/ir/dtype.h"

namespace einsummable::ir {

// Element `index` of the bytes of an i32 or i64 tensor (`dtype`), as int64: what an operator's
// check_input_values reads of an integer input (ids, positions, slots, lengths). The caller
// checks that `bytes` holds the element.
inline int64_t integer_at(DType dtype, absl::Span<const std::byte> bytes, size_t index) {
    if (dtype == DType::i64) {
        int64_t value = 0;
        std::memcpy(&value, bytes.data() + index * 8, 8);
        return value;
    }
    int32_t value = 0;
    std::memcpy(&value, bytes.data() + index * 4, 4);
    return value;
}

} // namespace einsummable::ir
