#pragma once

// The objectives live with the logical planner (compiler/logical/time_objective.h) and the
// simulated-time search is run through the pipeline (compiler/pipeline/passes.h); these names
// remain for the daemon's code, which moves to logical:: separately. Not for new code.
#include "compiler/logical/time_objective.h"

namespace einsummable::physical {

using logical::Objective;
using logical::objective_name;
using logical::parse_objective;

} // namespace einsummable::physical
