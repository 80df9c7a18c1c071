// print_program (parser.h): the canonical text of a program, which parse_program reads back.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/syntax.h"

namespace einsummable::exprog {

std::string print_program(const Program& program) {
    std::string text;
    auto site_list = [](const std::vector<Site>& sites) {
        return absl::StrJoin(sites, ", ", [](std::string* out, const Site& site) {
            absl::StrAppend(out, site.to_string());
        });
    };
    if (!program.gpus.empty()) {
        absl::StrAppend(&text, "GPUS: ", absl::StrJoin(program.gpus, ", "), "\n");
    }
    if (!program.partitions.empty()) {
        absl::StrAppend(&text, "PARTITIONS: ",
                        absl::StrJoin(program.partitions, ", ",
                                      [](std::string* out, const Partition& partition) {
                                          if (partition.size.has_value()) {
                                              absl::StrAppend(out, partition.name, " {size ",
                                                              *partition.size, "}");
                                          } else {
                                              absl::StrAppend(
                                                  out, partition.name, " {",
                                                  absl::StrJoin(partition.members, ", "), "}");
                                          }
                                      }),
                        "\n");
    }
    for (const InDecl& in : program.ins) {
        absl::StrAppend(&text, "IN: ", in.atom, " @ ", in.gpu,
                        " (size: ", syntax::size_text(in.bytes), ")\n");
    }
    for (const OutDecl& out : program.outs) {
        absl::StrAppend(&text, "OUT: ", aggregate_to_string(out.aggregate), " @ ",
                        site_list(out.sites), "\n");
    }
    if (!text.empty() && (!program.actions.empty() || !program.orders.empty())) {
        text += "\n";
    }
    for (const Action& action : program.actions) {
        absl::StrAppend(&text, action.to_string(), "\n");
    }
    // Consecutive pairs that chain (a < b, b < c) print as one chain.
    for (size_t i = 0; i < program.orders.size();) {
        absl::StrAppend(&text, "ORDER: ", program.orders[i].before, " < ", program.orders[i].after);
        size_t j = i + 1;
        for (; j < program.orders.size() && program.orders[j].before == program.orders[j - 1].after;
             ++j) {
            absl::StrAppend(&text, " < ", program.orders[j].after);
        }
        text += "\n";
        i = j;
    }
    return text;
}

} // namespace einsummable::exprog
