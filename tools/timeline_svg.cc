#include "tools/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace einsummable::tools {

TimeUnit time_unit(double seconds) {
    if (!std::isfinite(seconds) || seconds == 0.0 || seconds >= 1.0) {
        return {1.0, "s"};
    }
    if (seconds >= 1e-3) {
        return {1e-3, "ms"};
    }
    if (seconds >= 1e-6) {
        return {1e-6, "us"};
    }
    return {1e-9, "ns"};
}

std::string format_duration(double seconds) {
    if (seconds == 0.0) {
        return "0 s";
    }
    const TimeUnit unit = time_unit(seconds);
    return absl::StrFormat("%.3f %s", seconds / unit.scale, unit.name);
}

std::string format_bytes(double bytes) {
    static constexpr struct {
        double scale;
        const char* name;
    } kUnits[] = {{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "KB"}};
    for (const auto& unit : kUnits) {
        if (bytes >= unit.scale) {
            return absl::StrFormat("%.4g %s", bytes / unit.scale, unit.name);
        }
    }
    return absl::StrFormat("%.4g B", bytes);
}

namespace {

std::string xml_escape(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        case '\'':
            out += "&apos;";
            break;
        default:
            // XML 1.0 forbids most control characters even as references.
            if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
                out += ' ';
            } else {
                out += c;
            }
        }
    }
    return out;
}

// The smallest 1, 2 or 5 times a power of ten that is at least `raw`.
double nice_step(double raw) {
    if (!(raw > 0.0) || !std::isfinite(raw)) {
        return 1.0;
    }
    const double power = std::pow(10.0, std::floor(std::log10(raw)));
    for (double factor : {1.0, 2.0, 5.0, 10.0}) {
        if (factor * power >= raw * (1 - 1e-9)) {
            return factor * power;
        }
    }
    return 10.0 * power;
}

// One bar of a lane: [start, end) in seconds, its colours and texts.
struct Bar {
    double start = 0.0;
    double end = 0.0;
    std::string fill;
    std::string stroke;
    double opacity = 1.0;
    std::string label;     // drawn inside the bar where it fits
    std::string text_fill; // of the label
    std::string tooltip;
    // Set by render: pixels and the row within the lane.
    double x0 = 0.0;
    double x1 = 0.0;
    int row = 0;
};

struct LegendEntry {
    std::string fill;
    std::string stroke;
    double opacity = 1.0;
    std::string text;
};

constexpr double kWidth = 1200.0;
constexpr double kLeft = 110.0; // lane labels
constexpr double kRight = 30.0;
constexpr double kTitle = 34.0;      // title line
constexpr double kLegendLine = 16.0; // per legend line
constexpr double kRowHeight = 16.0;
constexpr double kLanePad = 4.0;
constexpr double kBottom = 48.0;   // axis and its label
constexpr double kCharWidth = 6.0; // of the 10px sans-serif bar labels, roughly

// Lanes top to bottom, bars stacked in rows by first fit (in pixels, so that even zero-length
// bars, drawn one pixel wide, never overlap), a legend wrapped over as many lines as it needs,
// and a time axis with 1-2-5 ticks in the makespan's unit.
std::string render(const std::string& title, const std::vector<std::string>& lane_names,
                   std::vector<std::vector<Bar>> lanes, double makespan,
                   const std::vector<LegendEntry>& legend) {
    const double plot_width = kWidth - kLeft - kRight;
    const double scale = makespan > 0.0 ? plot_width / makespan : 0.0;
    auto x_of = [&](double t) { return kLeft + t * scale; };

    // Legend layout first: it sets where the lanes begin.
    struct Placed {
        const LegendEntry* entry;
        double x;
        double y;
    };
    std::vector<Placed> placed;
    double legend_x = kLeft, legend_y = kTitle;
    for (const LegendEntry& entry : legend) {
        const double width = 18 + kCharWidth * 1.1 * entry.text.size() + 24;
        if (legend_x > kLeft && legend_x + width > kWidth - kRight) {
            legend_x = kLeft;
            legend_y += kLegendLine;
        }
        placed.push_back({&entry, legend_x, legend_y});
        legend_x += width;
    }
    const double top = legend_y + kLegendLine + 14;

    std::vector<int> rows_of(lanes.size(), 1);
    for (size_t lane = 0; lane < lanes.size(); ++lane) {
        std::vector<Bar>& bars = lanes[lane];
        for (Bar& bar : bars) {
            bar.x0 = x_of(bar.start);
            bar.x1 = std::max(x_of(bar.end), bar.x0 + 1.0);
        }
        std::stable_sort(bars.begin(), bars.end(), [](const Bar& a, const Bar& b) {
            return a.x0 != b.x0 ? a.x0 < b.x0 : a.x1 < b.x1;
        });
        std::vector<double> row_end;
        for (Bar& bar : bars) {
            size_t row = 0;
            while (row < row_end.size() && row_end[row] > bar.x0 + 1e-9) {
                ++row;
            }
            if (row == row_end.size()) {
                row_end.push_back(0.0);
            }
            row_end[row] = bar.x1;
            bar.row = static_cast<int>(row);
        }
        rows_of[lane] = std::max<int>(1, static_cast<int>(row_end.size()));
    }
    std::vector<double> lane_top(lanes.size() + 1, top);
    for (size_t lane = 0; lane < lanes.size(); ++lane) {
        lane_top[lane + 1] = lane_top[lane] + rows_of[lane] * kRowHeight + 2 * kLanePad;
    }
    const double plot_bottom = lane_top.back();
    const double height = plot_bottom + kBottom;

    std::string svg = absl::StrFormat(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
        "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
        "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n"
        "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n",
        kWidth, height, kWidth, height, kWidth, height, kLeft, xml_escape(title));
    for (const Placed& p : placed) {
        absl::StrAppendFormat(&svg,
                              "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\" "
                              "fill-opacity=\"%.2f\" stroke=\"%s\" stroke-width=\"0.5\"/>\n"
                              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n",
                              p.x, p.y, p.entry->fill, p.entry->opacity, p.entry->stroke, p.x + 18,
                              p.y + 9, xml_escape(p.entry->text));
    }

    // Lanes: alternating backgrounds and labels.
    for (size_t lane = 0; lane < lanes.size(); ++lane) {
        const double lane_y = lane_top[lane];
        const double lane_height = lane_top[lane + 1] - lane_y;
        absl::StrAppendFormat(&svg,
                              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                              "fill=\"%s\"/>\n"
                              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                              "text-anchor=\"end\">%s</text>\n",
                              kLeft, lane_y, plot_width, lane_height,
                              lane % 2 == 0 ? "#f4f4f4" : "#e8e8e8", kLeft - 8,
                              lane_y + lane_height / 2 + 4, xml_escape(lane_names[lane]));
    }

    const TimeUnit unit = time_unit(makespan);
    const double step = nice_step(makespan / 8);
    const int ticks = makespan > 0.0 ? static_cast<int>(std::floor(makespan / step + 1e-9)) : 0;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                          "stroke=\"black\"/>\n",
                          kLeft, plot_bottom, kLeft + plot_width, plot_bottom);
    for (int tick = 0; tick <= ticks; ++tick) {
        const double t = tick * step;
        const double x = x_of(t);
        absl::StrAppendFormat(&svg,
                              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                              "stroke=\"#cccccc\" stroke-width=\"0.5\"/>\n"
                              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                              "stroke=\"black\"/>\n"
                              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                              "text-anchor=\"middle\">%s</text>\n",
                              x, top, x, plot_bottom, x, plot_bottom, x, plot_bottom + 5, x,
                              plot_bottom + 18, absl::StrFormat("%.4g", t / unit.scale));
    }
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                          "text-anchor=\"middle\">time (%s)</text>\n",
                          kLeft + plot_width / 2, plot_bottom + 38, unit.name);

    for (size_t lane = 0; lane < lanes.size(); ++lane) {
        for (const Bar& bar : lanes[lane]) {
            const double y = lane_top[lane] + kLanePad + bar.row * kRowHeight + 1;
            const double h = kRowHeight - 2;
            const double w = bar.x1 - bar.x0;
            absl::StrAppendFormat(&svg,
                                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                                  "fill=\"%s\" fill-opacity=\"%.2f\" stroke=\"%s\" "
                                  "stroke-width=\"0.5\"><title>%s</title></rect>\n",
                                  bar.x0, y, w, h, bar.fill, bar.opacity, bar.stroke,
                                  xml_escape(bar.tooltip));
            if (!bar.label.empty() && w >= kCharWidth * bar.label.size() + 6) {
                absl::StrAppendFormat(
                    &svg, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"10\" fill=\"%s\">%s</text>\n",
                    bar.x0 + 3, y + h - 3.5, bar.text_fill, xml_escape(bar.label));
            }
        }
    }
    svg += "</svg>\n";
    return svg;
}

std::string task_tooltip(int index, const std::string& what, const exprog::SimTask& task,
                         const exprog::TaskTrace& trace) {
    std::string tooltip =
        absl::StrCat("task ", index, ": ", what, ": ", task.label, "\n",
                     format_duration(trace.start), " to ", format_duration(trace.end));
    if (trace.bytes > 0.0) {
        absl::StrAppend(&tooltip, ", ", format_bytes(trace.bytes));
    }
    if (task.kind != exprog::SimTask::Kind::compute) {
        absl::StrAppend(&tooltip, "\n",
                        trace.resources.empty() ? "no resource"
                                                : absl::StrJoin(trace.resources, ", "));
    }
    return tooltip;
}

// Twenty distinct colours (matplotlib's tab20, dark shades first), cycled.
const char* palette(size_t index) {
    static constexpr const char* kColours[] = {
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
        "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
        "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"};
    return kColours[index % (sizeof(kColours) / sizeof(kColours[0]))];
}

} // namespace

std::string timeline_svg(const std::vector<exprog::SimTask>& tasks,
                         const exprog::SimulationResult& result, const std::vector<int>& gpus,
                         const std::string& title) {
    constexpr const char* kSend = "#1f77b4";
    constexpr const char* kReceive = "#aec7e8";
    constexpr const char* kAggregate = "#ff7f0e";
    constexpr const char* kTransferStroke = "#1f4e79";
    constexpr const char* kAggregateStroke = "#b35806";
    std::map<int, size_t> lane_of;
    std::vector<std::string> names;
    for (size_t lane = 0; lane < gpus.size(); ++lane) {
        lane_of.emplace(gpus[lane], lane);
        names.push_back(absl::StrCat("GPU ", gpus[lane]));
    }
    std::vector<std::vector<Bar>> lanes(gpus.size());
    for (size_t idx = 0; idx < tasks.size() && idx < result.trace.size(); ++idx) {
        const exprog::SimTask& task = tasks[idx];
        const exprog::TaskTrace& trace = result.trace[idx];
        auto add = [&](int gpu, const char* fill, const char* stroke, const char* text_fill,
                       const std::string& what) {
            auto it = lane_of.find(gpu);
            if (it == lane_of.end()) {
                return;
            }
            Bar bar;
            bar.start = trace.start;
            bar.end = trace.end;
            bar.fill = fill;
            bar.stroke = stroke;
            bar.label = task.label;
            bar.text_fill = text_fill;
            bar.tooltip = task_tooltip(static_cast<int>(idx), what, task, trace);
            lanes[it->second].push_back(std::move(bar));
        };
        if (task.kind == exprog::SimTask::Kind::transfer) {
            const std::string what = absl::StrCat("transfer ", task.src_gpu, " -> ", task.dst_gpu);
            add(task.src_gpu, kSend, kTransferStroke, "white", what);
            add(task.dst_gpu, kReceive, kTransferStroke, "black", what);
        } else {
            add(task.src_gpu, kAggregate, kAggregateStroke, "black",
                absl::StrCat(task.kind == exprog::SimTask::Kind::aggregate ? "aggregate"
                                                                           : "compute",
                             " at GPU ", task.src_gpu));
        }
    }
    const std::vector<LegendEntry> legend = {
        {kSend, kTransferStroke, 1.0, "transfer (send, source GPU)"},
        {kReceive, kTransferStroke, 1.0, "transfer (receive, destination GPU)"},
        {kAggregate, kAggregateStroke, 1.0, "aggregate (HBM)"}};
    return render(title, names, std::move(lanes), result.makespan_s, legend);
}

std::string plan_timeline_svg(const physical::ExecGraph& exec,
                              const physical::PlanSimulation& simulation,
                              const std::string& title) {
    const size_t devices = simulation.gpus.size();
    std::map<int, size_t> lane_of;
    std::vector<std::string> names;
    for (size_t d = 0; d < devices; ++d) {
        lane_of.emplace(simulation.gpus[d], d);
        names.push_back(absl::StrCat("device ", d, " (GPU ", simulation.gpus[d], ")"));
    }
    // Operators in order of first appearance get palette colours.
    std::map<std::string, const char*> colour_of;
    std::vector<LegendEntry> legend;
    auto colour = [&](const std::string& op) {
        const std::string name = op.empty() ? "(saved outputs)" : op;
        auto it = colour_of.find(name);
        if (it == colour_of.end()) {
            it = colour_of.emplace(name, palette(colour_of.size())).first;
            legend.push_back({it->second, "#333333", 1.0, name});
        }
        return it->second;
    };
    std::vector<std::vector<Bar>> lanes(devices);
    for (size_t idx = 0; idx < simulation.tasks.size(); ++idx) {
        const exprog::SimTask& task = simulation.tasks[idx];
        const exprog::TaskTrace& trace = simulation.result.trace[idx];
        const char* fill = colour(simulation.node_operator[idx]);
        auto add = [&](int gpu, double opacity, const std::string& what) {
            Bar bar;
            bar.start = trace.start;
            bar.end = trace.end;
            bar.fill = fill;
            bar.stroke = "#333333";
            bar.opacity = opacity;
            bar.label = task.label;
            bar.text_fill = "black";
            bar.tooltip = task_tooltip(static_cast<int>(idx), what, task, trace);
            lanes[lane_of.at(gpu)].push_back(std::move(bar));
        };
        if (task.kind == exprog::SimTask::Kind::transfer) {
            const std::string what =
                absl::StrCat("transfer GPU ", task.src_gpu, " -> ", task.dst_gpu);
            add(task.src_gpu, 0.35, what);
            add(task.dst_gpu, 0.35, what);
        } else if (task.kind == exprog::SimTask::Kind::offload) { // past the nodes
            add(task.src_gpu, 0.35, absl::StrCat("offload GPU ", task.src_gpu, " -> host"));
        } else {
            const bool kernel = exec.nodes[idx].kind == physical::NodeKind::kernel;
            add(task.src_gpu, kernel ? 1.0 : 0.65, kernel ? "kernel" : "memory operation");
        }
    }
    legend.insert(legend.begin(), {{"#888888", "#333333", 1.0, "kernel"},
                                   {"#888888", "#333333", 0.65, "slice, concat, aggregate"},
                                   {"#888888", "#333333", 0.35, "transfer (on both devices)"}});
    return render(title, names, std::move(lanes), simulation.predicted_s, legend);
}

} // namespace einsummable::tools
