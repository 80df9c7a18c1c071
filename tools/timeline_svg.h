#pragma once

#include <string>
#include <vector>

#include "compiler/exprog/simulator.h"
#include "compiler/physical/plan_simulation.h"

namespace einsummable::tools {

// A unit for a span of time: the largest of s, ms, us and ns in which `seconds` is at least 1
// (ns below that; s for 0 and for anything not finite). `scale` is seconds per unit.
struct TimeUnit {
    double scale = 1.0;
    const char* name = "s";
};
TimeUnit time_unit(double seconds);

// `seconds` in its own unit with three decimals: "3.335 ms", "2.000 us", "0 s".
std::string format_duration(double seconds);

// A byte count in decimal units with up to four significant digits: "1 GB", "512 MB", "1.5 KB".
std::string format_bytes(double bytes);

// An SVG picture of a simulated run (docs/exprog.md, "Command line"): one horizontal lane per
// GPU of `gpus` (top to bottom in the given order). A transfer is drawn twice: as a send on its
// source GPU's lane and as a receive on its destination's; an aggregate on its GPU's lane. Bars
// that overlap in time within a lane are stacked in rows. Colours: send dark blue, receive light
// blue, aggregate orange. A time axis with tick labels runs along the bottom; every bar carries
// a <title> (its label, times, bytes and resources) that viewers show on hover. `title` heads
// the picture. Tasks on GPUs not in `gpus` are not drawn.
std::string timeline_svg(const std::vector<exprog::SimTask>& tasks,
                         const exprog::SimulationResult& result, const std::vector<int>& gpus,
                         const std::string& title);

// The whole-plan timeline (docs/simulation.md): one lane per device of the plan, every node a
// bar coloured by the operator it belongs to (legend: operators in order of first appearance):
// kernels solid, slices, concats and aggregates lighter, transfers palest and drawn on both
// the source and the destination device. Hover titles give each node's times and bytes.
std::string plan_timeline_svg(const physical::ExecGraph& exec,
                              const physical::PlanSimulation& simulation, const std::string& title);

} // namespace einsummable::tools
