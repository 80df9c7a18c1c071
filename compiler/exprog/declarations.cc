#include "compiler/exprog/declarations.h"

#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/syntax.h"

namespace einsummable::exprog {
namespace syntax {
namespace {

template <typename T>
const T& at_or(const std::vector<T>& values, size_t index, const T& fallback) {
    return index < values.size() ? values[index] : fallback;
}

// The declaration checks; the earliest problem in the text (then the first found) wins.
class DeclarationChecker {
public:
    DeclarationChecker(const Program& program, const Locations& locations)
        : program_(program), locations_(locations) {}

    absl::Status check() {
        check_gpus();
        check_partitions();
        check_ins();
        for (size_t i = 0; i < program_.outs.size(); ++i) {
            const OutDecl& out = program_.outs[i];
            const ListLocations& where = at_or(locations_.outs, i, empty_list_);
            check_aggregate(out.aggregate, out.location, where, "OUT");
            check_sites(out.sites, at_or(where.sites, 0, empty_sites_), out.location, "OUT");
        }
        for (size_t i = 0; i < program_.actions.size(); ++i) {
            check_action(program_.actions[i], at_or(locations_.actions, i, empty_list_));
        }
        check_orders();
        if (!found_) {
            return absl::OkStatus();
        }
        return absl::InvalidArgumentError(at_location(first_location_, first_message_));
    }

private:
    void report(SourceLocation location, std::string message) {
        const bool earlier =
            location.line > 0 && (first_location_.line <= 0 ||
                                  std::pair(location.line, location.column) <
                                      std::pair(first_location_.line, first_location_.column));
        if (!found_ || earlier) {
            found_ = true;
            first_location_ = location;
            first_message_ = std::move(message);
        }
    }

    void check_gpus() {
        for (size_t i = 0; i < program_.gpus.size(); ++i) {
            const int gpu = program_.gpus[i];
            const SourceLocation location = at_or(locations_.gpus, i, SourceLocation{});
            if (gpu < 0) {
                report(location, absl::StrCat("GPU id ", gpu, " is negative"));
            } else if (!gpus_.insert(gpu).second) {
                report(location, absl::StrCat("GPU ", gpu, " is declared twice"));
            }
        }
    }

    void check_partitions() {
        std::set<std::string> names;
        const PartitionLocations none;
        for (size_t i = 0; i < program_.partitions.size(); ++i) {
            const Partition& partition = program_.partitions[i];
            const PartitionLocations& where = at_or(locations_.partitions, i, none);
            const std::string name = quote(partition.name);
            if (!is_identifier(partition.name)) {
                report(where.name, absl::StrCat("partition name ", name,
                                                " is not an identifier (a letter, then letters, "
                                                "digits or '_')"));
            }
            if (!names.insert(partition.name).second) {
                report(where.name, absl::StrCat("duplicate partition name ", name));
            }
            if (partition.size.has_value()) {
                const int size = *partition.size;
                if (size < 1) {
                    report(where.size, absl::StrCat("partition ", name, " has size ", size,
                                                    "; a size must be at least 1"));
                } else if (static_cast<size_t>(size) > program_.gpus.size()) {
                    report(where.size,
                           absl::StrCat("partition ", name, " has size ", size, " but only ",
                                        program_.gpus.size(), " GPUs are declared"));
                }
                if (!partition.members.empty()) {
                    report(where.name,
                           absl::StrCat("partition ", name, " has both a size and members"));
                }
                continue;
            }
            if (partition.members.empty()) {
                report(where.name, absl::StrCat("partition ", name, " has no members"));
            }
            std::set<int> members;
            for (size_t m = 0; m < partition.members.size(); ++m) {
                const int gpu = partition.members[m];
                const SourceLocation location = at_or(where.members, m, where.name);
                if (gpus_.count(gpu) == 0) {
                    report(location, absl::StrCat("undeclared GPU ", gpu, " in partition ", name));
                } else if (!members.insert(gpu).second) {
                    report(location,
                           absl::StrCat("GPU ", gpu, " is listed twice in partition ", name));
                }
            }
        }
    }

    void check_ins() {
        std::set<std::pair<std::string, int>> placed;
        std::map<std::string, size_t> first_of_atom;
        const InLocations none;
        for (size_t i = 0; i < program_.ins.size(); ++i) {
            const InDecl& in = program_.ins[i];
            const InLocations& where = at_or(locations_.ins, i, none);
            const std::string atom = quote(in.atom);
            if (!is_identifier(in.atom)) {
                report(where.atom, absl::StrCat("atom name ", atom,
                                                " is not an identifier (a letter, then letters, "
                                                "digits or '_')"));
            }
            if (gpus_.count(in.gpu) == 0) {
                report(where.gpu, absl::StrCat("undeclared GPU ", in.gpu, " in IN of atom ", atom));
            }
            if (!(in.bytes > 0) || !std::isfinite(in.bytes)) {
                report(where.atom,
                       absl::StrCat("size of atom ", atom, " must be positive and finite"));
            }
            if (!placed.insert({in.atom, in.gpu}).second) {
                report(where.atom,
                       absl::StrCat("atom ", atom, " is declared twice at GPU ", in.gpu));
            }
            const auto [first, inserted] = first_of_atom.emplace(in.atom, i);
            if (!inserted && program_.ins[first->second].bytes != in.bytes) {
                const InDecl& other = program_.ins[first->second];
                report(where.atom,
                       absl::StrCat("atom ", atom, " has size ", size_text(in.bytes), " at GPU ",
                                    in.gpu, " but ", size_text(other.bytes), " at GPU ", other.gpu,
                                    "; copies of an atom have one size"));
            }
            atoms_.insert(in.atom);
        }
    }

    void check_aggregate(const Aggregate& aggregate, SourceLocation fallback,
                         const ListLocations& where, absl::string_view what) {
        if (aggregate.empty()) {
            report(fallback, absl::StrCat("empty aggregate in ", what));
        }
        for (const std::string& atom : aggregate) {
            const auto found = where.atoms.find(atom);
            const SourceLocation location = found == where.atoms.end() ? fallback : found->second;
            if (atoms_.count(atom) == 0) {
                report(location,
                       absl::StrCat("undeclared atom ", quote(atom), " (no IN declares it)"));
            }
        }
    }

    void check_site(const Site& site, SourceLocation location) {
        if (site.is_partition) {
            if (program_.find_partition(site.partition) == nullptr) {
                report(location, absl::StrCat("undeclared partition ", quote(site.partition)));
            }
        } else if (gpus_.count(site.gpu) == 0) {
            report(location, absl::StrCat("undeclared GPU ", site.gpu));
        }
    }

    void check_sites(const std::vector<Site>& sites, const std::vector<SourceLocation>& where,
                     SourceLocation fallback, absl::string_view what) {
        if (sites.empty()) {
            report(fallback, absl::StrCat("empty site list in ", what));
        }
        for (size_t i = 0; i < sites.size(); ++i) {
            const SourceLocation location = at_or(where, i, fallback);
            check_site(sites[i], location);
            for (size_t j = 0; j < i; ++j) {
                if (sites[j] == sites[i]) {
                    report(location, absl::StrCat("site ", quote(sites[i].to_string()),
                                                  " is listed twice in ", what));
                    break;
                }
            }
        }
    }

    void check_label(const Action& action, SourceLocation location) {
        if (action.label.empty()) {
            return;
        }
        const std::string label = quote(action.label);
        if (!is_identifier(action.label)) {
            report(location, absl::StrCat("label ", label,
                                          " is not an identifier (a letter, then letters, digits "
                                          "or '_')"));
        } else if (is_header_keyword(action.label)) {
            report(location, keyword_label_message(action.label));
        }
        const auto [first, inserted] = labels_.emplace(action.label, location);
        if (!inserted) {
            report(location, first->second.line > 0
                                 ? absl::StrCat("duplicate label ", label, " (first at line ",
                                                first->second.line, ")")
                                 : absl::StrCat("duplicate label ", label));
        }
    }

    void check_chunk(const Chunk& chunk, const ListLocations& where, SourceLocation fallback) {
        auto or_fallback = [&](SourceLocation location) {
            return location.line > 0 ? location : fallback;
        };
        if (chunk.count < 1 || chunk.count > Chunk::kMaxCount) {
            report(or_fallback(where.chunk_count),
                   absl::StrCat("chunk count ", chunk.count, ": must be between 1 and ",
                                Chunk::kMaxCount));
        } else if (chunk.index < 0 || chunk.index >= chunk.count) {
            report(or_fallback(where.chunk_index),
                   absl::StrCat("chunk index ", chunk.index, " out of range for ", chunk.count,
                                chunk.count == 1 ? " chunk" : " chunks", " (0 to ", chunk.count - 1,
                                ")"));
        }
    }

    // Run after every action's label is known (labels_), so ORDER may precede the actions.
    void check_orders() {
        for (const OrderDecl& order : program_.orders) {
            const SourceLocation after_location =
                order.after_location.line > 0 ? order.after_location : order.location;
            bool declared = true;
            for (const auto& [label, location] : {std::pair(&order.before, order.location),
                                                  std::pair(&order.after, after_location)}) {
                if (labels_.count(*label) == 0) {
                    report(location, absl::StrCat("ORDER names label ", quote(*label),
                                                  " that no action has"));
                    declared = false;
                }
            }
            if (declared && order.before == order.after) {
                report(after_location,
                       absl::StrCat("action ", quote(order.after), " is ordered after itself"));
            }
        }
    }

    void check_action(const Action& action, const ListLocations& where) {
        check_label(action, where.label.line > 0 ? where.label : action.location);
        check_aggregate(action.aggregate, action.location, where, "action");
        check_chunk(action.chunk, where, action.location);
        check_site(action.source, where.source.line > 0 ? where.source : action.location);
        for (size_t h = 0; h < action.hops.size(); ++h) {
            const std::vector<Site>& hop = action.hops[h];
            const std::vector<SourceLocation>& hop_where = at_or(where.sites, h, empty_sites_);
            if (hop.empty()) {
                report(action.location, "empty hop in action");
            } else if (hop.size() > 1 && h + 1 < action.hops.size()) {
                report(at_or(hop_where, 0, action.location),
                       "multicast in a non-final relay hop: only the last hop may name several "
                       "sites");
            }
            check_sites(hop, hop_where, action.location, "a hop");
        }
    }

    const Program& program_;
    const Locations& locations_;
    const ListLocations empty_list_;
    const std::vector<SourceLocation> empty_sites_;
    std::set<int> gpus_;
    std::set<std::string> atoms_;
    std::map<std::string, SourceLocation> labels_; // each label's first action
    bool found_ = false;
    SourceLocation first_location_;
    std::string first_message_;
};

} // namespace

Locations element_locations(const Program& program) {
    Locations locations;
    locations.gpus.assign(program.gpus.size(), SourceLocation{});
    for (const Partition& partition : program.partitions) {
        locations.partitions.push_back(
            {partition.location, partition.location,
             std::vector<SourceLocation>(partition.members.size(), partition.location)});
    }
    for (const InDecl& in : program.ins) {
        locations.ins.push_back({in.location, in.location});
    }
    auto list = [](const Aggregate& aggregate, SourceLocation location,
                   const std::vector<std::vector<Site>>& lists) {
        ListLocations result;
        for (const std::string& atom : aggregate) {
            result.atoms[atom] = location;
        }
        result.source = location;
        for (const std::vector<Site>& sites : lists) {
            result.sites.emplace_back(sites.size(), location);
        }
        return result;
    };
    for (const OutDecl& out : program.outs) {
        locations.outs.push_back(list(out.aggregate, out.location, {out.sites}));
    }
    for (const Action& action : program.actions) {
        ListLocations where = list(action.aggregate, action.location, action.hops);
        where.label = where.chunk_index = where.chunk_count = action.location;
        locations.actions.push_back(std::move(where));
    }
    return locations;
}

absl::Status check_declarations(const Program& program, const Locations& locations) {
    return DeclarationChecker(program, locations).check();
}

} // namespace syntax

absl::Status check_declarations(const Program& program) {
    return syntax::check_declarations(program, syntax::element_locations(program));
}

} // namespace einsummable::exprog
