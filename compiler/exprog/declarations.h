#pragma once

// The declaration checks of the ExProg text format (parser.h, check_declarations), with the
// source locations their messages name. Internal to parser.h's functions.

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/exprog/program.h"

namespace einsummable::exprog::syntax {

// Where each part of a program was written, for the declaration checks' messages. The parser
// records token locations; a program built in code gets each element's own location.

struct PartitionLocations {
    SourceLocation name;
    SourceLocation size;
    std::vector<SourceLocation> members;
};

struct InLocations {
    SourceLocation atom;
    SourceLocation gpu;
};

struct ListLocations {
    std::map<std::string, SourceLocation> atoms;
    SourceLocation label; // actions only, from here on
    SourceLocation chunk_index;
    SourceLocation chunk_count;
    SourceLocation source;
    std::vector<std::vector<SourceLocation>> sites; // OUT: one list; action: one per hop
};

struct Locations {
    std::vector<SourceLocation> gpus;
    std::vector<PartitionLocations> partitions;
    std::vector<InLocations> ins;
    std::vector<ListLocations> outs;
    std::vector<ListLocations> actions;
};

// The locations of a program built in code: each element's own location for all its parts.
Locations element_locations(const Program& program);

// The declaration rules (parser.h, check_declarations) with messages at `locations`: the
// earliest problem in the text, then the first found, wins. InvalidArgument
// "line L column C: ...", or the message alone where the location is {0, 0}.
absl::Status check_declarations(const Program& program, const Locations& locations);

} // namespace einsummable::exprog::syntax
