#include "compiler/ir/attributes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace einsummable::ir {

namespace {

template <typename T>
absl::string_view type_name() {
    if constexpr (std::is_same_v<T, bool>) {
        return "bool";
    } else if constexpr (std::is_same_v<T, int64_t>) {
        return "int";
    } else if constexpr (std::is_same_v<T, double>) {
        return "float";
    } else if constexpr (std::is_same_v<T, std::string>) {
        return "string";
    } else {
        return "list of ints";
    }
}

absl::string_view value_type_name(const AttrValue& value) {
    return std::visit([](const auto& v) { return type_name<std::decay_t<decltype(v)>>(); }, value);
}

template <typename T>
absl::StatusOr<T> get_typed(const std::map<std::string, AttrValue>& values,
                            const std::string& name) {
    auto it = values.find(name);
    if (it == values.end()) {
        return absl::InvalidArgumentError(absl::StrCat("missing attribute '", name, "'"));
    }
    if (const T* value = std::get_if<T>(&it->second)) {
        return *value;
    }
    if constexpr (std::is_same_v<T, double>) {
        if (const int64_t* value = std::get_if<int64_t>(&it->second)) {
            return static_cast<double>(*value);
        }
    }
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be a ",
                                                   type_name<T>(), ", got a ",
                                                   value_type_name(it->second)));
}

template <typename T>
absl::StatusOr<T> get_typed_or(const Attributes& attrs, const std::string& name, T fallback) {
    if (!attrs.has(name)) {
        return fallback;
    }
    return get_typed<T>(attrs.values(), name);
}

} // namespace

absl::StatusOr<std::string> Attributes::get_string(const std::string& name) const {
    return get_typed<std::string>(values_, name);
}
absl::StatusOr<int64_t> Attributes::get_int(const std::string& name) const {
    return get_typed<int64_t>(values_, name);
}
absl::StatusOr<double> Attributes::get_double(const std::string& name) const {
    return get_typed<double>(values_, name);
}
absl::StatusOr<bool> Attributes::get_bool(const std::string& name) const {
    return get_typed<bool>(values_, name);
}
absl::StatusOr<std::vector<int64_t>> Attributes::get_ints(const std::string& name) const {
    return get_typed<std::vector<int64_t>>(values_, name);
}

absl::StatusOr<std::string> Attributes::get_string_or(const std::string& name,
                                                      std::string fallback) const {
    return get_typed_or<std::string>(*this, name, std::move(fallback));
}
absl::StatusOr<int64_t> Attributes::get_int_or(const std::string& name, int64_t fallback) const {
    return get_typed_or<int64_t>(*this, name, fallback);
}
absl::StatusOr<double> Attributes::get_double_or(const std::string& name, double fallback) const {
    return get_typed_or<double>(*this, name, fallback);
}
absl::StatusOr<bool> Attributes::get_bool_or(const std::string& name, bool fallback) const {
    return get_typed_or<bool>(*this, name, fallback);
}
absl::StatusOr<std::vector<int64_t>> Attributes::get_ints_or(const std::string& name,
                                                             std::vector<int64_t> fallback) const {
    return get_typed_or<std::vector<int64_t>>(*this, name, std::move(fallback));
}

absl::Status Attributes::check_known(absl::Span<const absl::string_view> known) const {
    for (const auto& [name, value] : values_) {
        if (std::find(known.begin(), known.end(), name) == known.end()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "unknown attribute '", name, "' (known: ", absl::StrJoin(known, ", "), ")"));
        }
    }
    return absl::OkStatus();
}

std::string attr_value_to_string(const AttrValue& value) {
    return std::visit(
        [](const auto& v) -> std::string {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>) {
                return v ? "true" : "false";
            } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
                return absl::StrCat("[", absl::StrJoin(v, ","), "]");
            } else {
                return absl::StrCat(v);
            }
        },
        value);
}

std::string Attributes::to_string() const {
    return absl::StrJoin(values_, " ", [](std::string* out, const auto& entry) {
        absl::StrAppend(out, entry.first, "=", attr_value_to_string(entry.second));
    });
}

} // namespace einsummable::ir
