#include "compiler/ir/scalar_op.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace einsummable::ir {

namespace {

constexpr std::pair<ScalarFn, absl::string_view> kNames[] = {
    {ScalarFn::identity, "identity"},
    {ScalarFn::neg, "neg"},
    {ScalarFn::abs, "abs"},
    {ScalarFn::relu, "relu"},
    {ScalarFn::gelu, "gelu"},
    {ScalarFn::silu, "silu"},
    {ScalarFn::sigmoid, "sigmoid"},
    {ScalarFn::tanh, "tanh"},
    {ScalarFn::exp, "exp"},
    {ScalarFn::log, "log"},
    {ScalarFn::sqrt, "sqrt"},
    {ScalarFn::rsqrt, "rsqrt"},
    {ScalarFn::square, "square"},
    {ScalarFn::reciprocal, "reciprocal"},
    {ScalarFn::scale, "scale"},
    {ScalarFn::add_scalar, "add_scalar"},
    {ScalarFn::pow_scalar, "pow_scalar"},
    {ScalarFn::leaky_relu, "leaky_relu"},
    {ScalarFn::add, "add"},
    {ScalarFn::sub, "sub"},
    {ScalarFn::mul, "mul"},
    {ScalarFn::div, "div"},
    {ScalarFn::max, "max"},
    {ScalarFn::min, "min"},
};

} // namespace

int ScalarOp::arity() const {
    return fn >= ScalarFn::add ? 2 : 1;
}

double ScalarOp::apply(double x) const {
    switch (fn) {
    case ScalarFn::identity:
        return x;
    case ScalarFn::neg:
        return -x;
    case ScalarFn::abs:
        return std::abs(x);
    case ScalarFn::relu:
        return x < 0.0 ? 0.0 : x; // NaN passes through
    case ScalarFn::gelu:          // exact (erf) form
        return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ScalarFn::silu:
        return x / (1.0 + std::exp(-x));
    case ScalarFn::sigmoid:
        return 1.0 / (1.0 + std::exp(-x));
    case ScalarFn::tanh:
        return std::tanh(x);
    case ScalarFn::exp:
        return std::exp(x);
    case ScalarFn::log:
        return std::log(x);
    case ScalarFn::sqrt:
        return std::sqrt(x);
    case ScalarFn::rsqrt:
        return 1.0 / std::sqrt(x);
    case ScalarFn::square:
        return x * x;
    case ScalarFn::reciprocal:
        return 1.0 / x;
    case ScalarFn::scale:
        return x * constant;
    case ScalarFn::add_scalar:
        return x + constant;
    case ScalarFn::pow_scalar:
        return std::pow(x, constant);
    case ScalarFn::leaky_relu:
        return x > 0.0 ? x : x * constant;
    default:
        return x;
    }
}

double ScalarOp::apply(double x, double y) const {
    switch (fn) {
    case ScalarFn::add:
        return x + y;
    case ScalarFn::sub:
        return x - y;
    case ScalarFn::mul:
        return x * y;
    case ScalarFn::div:
        return x / y;
    case ScalarFn::max:
        return propagating_max(x, y);
    case ScalarFn::min:
        return propagating_min(x, y);
    default:
        return x;
    }
}

absl::string_view ScalarOp::name() const {
    for (const auto& [candidate, name] : kNames) {
        if (candidate == fn) {
            return name;
        }
    }
    return "?";
}

absl::StatusOr<ScalarOp> ScalarOp::parse(absl::string_view name, double constant) {
    for (const auto& [fn, candidate] : kNames) {
        if (candidate == name) {
            return ScalarOp{fn, constant};
        }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown scalar op '", name, "' (known: ",
                     absl::StrJoin(kNames, ", ",
                                   [](std::string* out, const auto& entry) {
                                       absl::StrAppend(out, entry.second);
                                   }),
                     ")"));
}

} // namespace einsummable::ir
