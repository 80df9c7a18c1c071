#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace einsummable::ir {

// An operator attribute value: what a graph file or GraphDef can carry (data, never code).
using AttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;

// Named operator attributes with typed, error-reporting accessors. Every error names the
// attribute; callers add the operator.
class Attributes {
public:
    Attributes() = default;
    Attributes(std::initializer_list<std::pair<const std::string, AttrValue>> values)
        : values_(values) {}

    void set(std::string name, AttrValue value) { values_[std::move(name)] = std::move(value); }
    bool has(const std::string& name) const { return values_.count(name) > 0; }
    const std::map<std::string, AttrValue>& values() const { return values_; }

    absl::StatusOr<std::string> get_string(const std::string& name) const;
    absl::StatusOr<int64_t> get_int(const std::string& name) const;
    // Integers are accepted where a double is expected.
    absl::StatusOr<double> get_double(const std::string& name) const;
    absl::StatusOr<bool> get_bool(const std::string& name) const;
    absl::StatusOr<std::vector<int64_t>> get_ints(const std::string& name) const;

    // The same, with a default when the attribute is absent (a present one of the wrong type is
    // still an error).
    absl::StatusOr<std::string> get_string_or(const std::string& name, std::string fallback) const;
    absl::StatusOr<int64_t> get_int_or(const std::string& name, int64_t fallback) const;
    absl::StatusOr<double> get_double_or(const std::string& name, double fallback) const;
    absl::StatusOr<bool> get_bool_or(const std::string& name, bool fallback) const;
    absl::StatusOr<std::vector<int64_t>> get_ints_or(const std::string& name,
                                                     std::vector<int64_t> fallback) const;

    // Error naming the first attribute not in `known`, so typos do not pass silently.
    absl::Status check_known(absl::Span<const absl::string_view> known) const;

    std::string to_string() const; // "agg=sum equation=ij,jk->ik"

private:
    std::map<std::string, AttrValue> values_;
};

std::string attr_value_to_string(const AttrValue& value);

} // namespace einsummable::ir
