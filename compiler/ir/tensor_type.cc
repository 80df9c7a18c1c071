#include "compiler/ir/tensor_type.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace einsummable::ir {

std::vector<int64_t> TensorType::shape() const {
    std::vector<int64_t> out;
    out.reserve(dims.size());
    for (const Dim& dim : dims) {
        out.push_back(dim.size);
    }
    return out;
}

std::string TensorType::to_string() const {
    return absl::StrCat(dtype_name(dtype), "[",
                        absl::StrJoin(dims, ", ",
                                      [](std::string* out, const Dim& dim) {
                                          absl::StrAppend(out, dim.name, "=", dim.size);
                                      }),
                        "]");
}

} // namespace einsummable::ir
