#include "compiler/workloads/matrix_chain.h"

#include <cctype>
#include <map>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/graph_builder.h"

namespace einsummable::workloads {

absl::StatusOr<std::vector<int64_t>> chain_dims(char name) {
    // The exact lists; the rule they follow is in the header (and checked by
    // tests/unit/workloads/matrix_chain_test.cc).
    switch (name) {
    case 'A': // ends 10240; interior alternates 16384, 6144
        return std::vector<int64_t>{10240, 16384, 6144,  16384, 6144,
                                    16384, 6144,  16384, 6144,  10240};
    case 'B': // ends 9216; interior alternates 20480, 5120
        return std::vector<int64_t>{9216, 20480, 5120, 20480, 5120, 9216};
    case 'C':
        return std::vector<int64_t>{10240, 12288, 32768, 2048};
    case 'D': // ends 24576, necks 1536, interior 20480
        return std::vector<int64_t>{24576, 1536,  20480, 20480, 20480,
                                    20480, 20480, 20480, 1536,  24576};
    case 'E': // ends 49152, necks 1024, interior 20480
        return std::vector<int64_t>{49152, 1024,  20480, 20480, 20480, 20480, 20480,
                                    20480, 20480, 20480, 20480, 20480, 1024,  49152};
    default:
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown matrix chain '", absl::CHexEscape(std::string(1, name)), "' (known: A to E)"));
    }
}

absl::StatusOr<std::string> chain_parenthesisation(char name) {
    switch (name) {
    case 'A':
        return std::string("(M1 M2)(((M3 M4)((M5 M6)(M7 M8))) M9)");
    case 'B':
        return std::string("(M1 M2)((M3 M4) M5)");
    case 'C':
        return std::string("M1 (M2 M3)");
    case 'D':
        return std::string("M1((M2(M3(M4(M5(M6(M7 M8))))))M9)");
    case 'E':
        return std::string("M1((M2(M3(M4(M5(M6(M7(M8(M9(M10(M11 M12))))))))))M13)");
    default:
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown matrix chain '", absl::CHexEscape(std::string(1, name)), "' (known: A to E)"));
    }
}

namespace {

// Recursive descent over
//   group := term [term]          (one factor, or the product of two)
//   term  := 'M' digits | '(' group ')'
class ParenthesisationParser {
public:
    explicit ParenthesisationParser(absl::string_view text) : text_(text) {}

    absl::StatusOr<std::vector<ChainProduct>> parse() {
        Range whole;
        EINSUMMABLE_RETURN_IF_ERROR(group(0, &whole));
        skip_spaces();
        if (pos_ < text_.size()) { // group() stops only at the end or at ')'
            return error("unmatched ')'");
        }
        if (products_.empty()) {
            return absl::InvalidArgumentError(absl::StrCat(
                prefix(), "a chain needs at least two matrices, this one has ", whole.last));
        }
        return std::move(products_);
    }

private:
    struct Range {
        int first = 0;
        int last = 0;
    };
    static constexpr int kMaxDepth = 256;

    std::string prefix() const {
        return absl::StrCat("parenthesisation '", absl::CHexEscape(text_), "': ");
    }
    absl::Status error(absl::string_view message) const {
        return absl::InvalidArgumentError(absl::StrCat(prefix(), message, " at offset ", pos_));
    }
    void skip_spaces() {
        while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) {
            ++pos_;
        }
    }
    bool at_group_end() {
        skip_spaces();
        return pos_ == text_.size() || text_[pos_] == ')';
    }

    absl::Status group(int depth, Range* out) {
        Range lhs;
        EINSUMMABLE_RETURN_IF_ERROR(term(depth, &lhs));
        if (at_group_end()) {
            *out = lhs;
            return absl::OkStatus();
        }
        Range rhs;
        EINSUMMABLE_RETURN_IF_ERROR(term(depth, &rhs));
        products_.push_back({lhs.first, lhs.last, rhs.last});
        *out = {lhs.first, rhs.last};
        if (!at_group_end()) {
            return error("a third juxtaposed factor (parenthesise every product: which pair "
                         "multiplies first would be ambiguous)");
        }
        return absl::OkStatus();
    }

    absl::Status term(int depth, Range* out) {
        skip_spaces();
        if (pos_ == text_.size()) {
            return error("unexpected end, expected 'M<k>' or '('");
        }
        if (text_[pos_] == '(') {
            if (depth >= kMaxDepth) {
                return error(absl::StrCat("parentheses nested deeper than ", kMaxDepth));
            }
            const size_t open = pos_++;
            EINSUMMABLE_RETURN_IF_ERROR(group(depth + 1, out));
            if (pos_ == text_.size()) {
                return error(absl::StrCat("missing ')' for the '(' at offset ", open));
            }
            ++pos_; // at_group_end() left pos_ on ')'
            return absl::OkStatus();
        }
        if (text_[pos_] != 'M') {
            return error(absl::StrCat("unexpected '", absl::CHexEscape(text_.substr(pos_, 1)),
                                      "', expected 'M<k>' or '('"));
        }
        const size_t start = pos_++;
        while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
            ++pos_;
        }
        const absl::string_view digits = text_.substr(start + 1, pos_ - start - 1);
        if (digits != absl::StrCat(next_)) {
            const size_t at = pos_;
            pos_ = start;
            absl::Status status = error(
                digits.empty() ? std::string("'M' without a matrix number")
                               : absl::StrCat("matrix 'M", absl::CHexEscape(digits.substr(0, 12)),
                                              "' out of order: expected M", next_,
                                              " (a parenthesisation keeps the matrices in order)"));
            pos_ = at;
            return status;
        }
        *out = {next_, next_};
        ++next_;
        return absl::OkStatus();
    }

    absl::string_view text_;
    size_t pos_ = 0;
    int next_ = 1; // number of the next matrix
    std::vector<ChainProduct> products_;
};

std::string matrix_name(int first, int last) {
    return first == last ? absl::StrCat("M", first) : absl::StrCat("m", first, "_", last);
}

} // namespace

absl::StatusOr<std::vector<ChainProduct>> parse_parenthesisation(absl::string_view text) {
    return ParenthesisationParser(text).parse();
}

absl::StatusOr<ir::Graph> chain_from(absl::string_view parenthesisation,
                                     absl::Span<const int64_t> dims, ir::DType dtype) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<ChainProduct> products,
                                 parse_parenthesisation(parenthesisation));
    const int n = products.back().last;
    if (dims.size() != static_cast<size_t>(n) + 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "matrix chain: ", n, " matrices need ", n + 1, " boundary sizes, got ", dims.size()));
    }
    GraphBuilder b("matrix chain");
    std::map<std::pair<int, int>, ir::TensorId> tensors; // by the matrices they cover
    for (int i = 1; i <= n; ++i) {
        tensors[{i, i}] =
            b.input(matrix_name(i, i), dtype,
                    {{absl::StrCat("b", i - 1), dims[i - 1]}, {absl::StrCat("b", i), dims[i]}});
    }
    for (const ChainProduct& product : products) {
        const ir::TensorId lhs = tensors.at({product.first, product.split});
        const ir::TensorId rhs = tensors.at({product.split + 1, product.last});
        tensors[{product.first, product.last}] =
            b.einsum(matrix_name(product.first, product.last), "ij,jk->ik", {lhs, rhs});
    }
    b.save(tensors.at({1, n}));
    return std::move(b).finish();
}

absl::StatusOr<ir::Graph> chain(char name, ir::DType dtype) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> dims, chain_dims(name));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string parenthesisation, chain_parenthesisation(name));
    return chain_from(parenthesisation, dims, dtype);
}

} // namespace einsummable::workloads
