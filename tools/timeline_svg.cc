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

enum class BarKind { send, receive, aggregate };

struct Bar {
    int task = 0;
    BarKind kind = BarKind::send;
    double x0 = 0.0; // pixels
    double x1 = 0.0;
    int row = 0;
};

const char* fill_of(BarKind kind) {
    switch (kind) {
    case BarKind::send:
        return "#1f77b4";
    case BarKind::receive:
        return "#aec7e8";
    case BarKind::aggregate:
        return "#ff7f0e";
    }
    return "#999999";
}

const char* stroke_of(BarKind kind) {
    return kind == BarKind::aggregate ? "#b35806" : "#1f4e79";
}

constexpr double kWidth = 1200.0;
constexpr double kLeft = 80.0; // lane labels
constexpr double kRight = 30.0;
constexpr double kTop = 64.0; // title and legend
constexpr double kRowHeight = 16.0;
constexpr double kLanePad = 4.0;
constexpr double kBottom = 48.0;   // axis and its label
constexpr double kCharWidth = 6.0; // of the 10px sans-serif bar labels, roughly

} // namespace

std::string timeline_svg(const std::vector<exprog::SimTask>& tasks,
                         const exprog::SimulationResult& result, const std::vector<int>& gpus,
                         const std::string& title) {
    const double makespan = result.makespan_s;
    const double plot_width = kWidth - kLeft - kRight;
    const double scale = makespan > 0.0 ? plot_width / makespan : 0.0;
    auto x_of = [&](double t) { return kLeft + t * scale; };

    // The bars of each lane, stacked in rows by first fit (in pixels, so that even
    // zero-length bars, drawn one pixel wide, never overlap).
    std::map<int, size_t> lane_of;
    for (size_t lane = 0; lane < gpus.size(); ++lane) {
        lane_of.emplace(gpus[lane], lane);
    }
    std::vector<std::vector<Bar>> lanes(gpus.size());
    for (size_t idx = 0; idx < tasks.size() && idx < result.trace.size(); ++idx) {
        const exprog::SimTask& task = tasks[idx];
        const exprog::TaskTrace& trace = result.trace[idx];
        auto add = [&](int gpu, BarKind kind) {
            auto it = lane_of.find(gpu);
            if (it == lane_of.end()) {
                return;
            }
            Bar bar;
            bar.task = static_cast<int>(idx);
            bar.kind = kind;
            bar.x0 = x_of(trace.start);
            bar.x1 = std::max(x_of(trace.end), bar.x0 + 1.0);
            lanes[it->second].push_back(bar);
        };
        if (task.kind == exprog::SimTask::Kind::aggregate) {
            add(task.src_gpu, BarKind::aggregate);
        } else {
            add(task.src_gpu, BarKind::send);
            add(task.dst_gpu, BarKind::receive);
        }
    }
    std::vector<int> rows_of(gpus.size(), 1);
    for (size_t lane = 0; lane < lanes.size(); ++lane) {
        std::vector<Bar>& bars = lanes[lane];
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
    std::vector<double> lane_top(gpus.size() + 1, kTop);
    for (size_t lane = 0; lane < gpus.size(); ++lane) {
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

    // Legend.
    const struct {
        BarKind kind;
        const char* text;
    } kLegend[] = {{BarKind::send, "transfer (send, source GPU)"},
                   {BarKind::receive, "transfer (receive, destination GPU)"},
                   {BarKind::aggregate, "aggregate (HBM)"}};
    double legend_x = kLeft;
    for (const auto& entry : kLegend) {
        absl::StrAppendFormat(&svg,
                              "<rect x=\"%.1f\" y=\"34\" width=\"14\" height=\"10\" fill=\"%s\" "
                              "stroke=\"%s\" stroke-width=\"0.5\"/>\n"
                              "<text x=\"%.1f\" y=\"43\" font-size=\"11\">%s</text>\n",
                              legend_x, fill_of(entry.kind), stroke_of(entry.kind), legend_x + 18,
                              entry.text);
        legend_x += 18 + kCharWidth * 1.1 * std::string(entry.text).size() + 24;
    }

    // Lanes: alternating backgrounds and labels.
    for (size_t lane = 0; lane < gpus.size(); ++lane) {
        const double top = lane_top[lane];
        const double lane_height = lane_top[lane + 1] - top;
        absl::StrAppendFormat(&svg,
                              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                              "fill=\"%s\"/>\n"
                              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                              "text-anchor=\"end\">GPU %d</text>\n",
                              kLeft, top, plot_width, lane_height,
                              lane % 2 == 0 ? "#f4f4f4" : "#e8e8e8", kLeft - 8,
                              top + lane_height / 2 + 4, gpus[lane]);
    }

    // Time axis: ticks at a 1-2-5 step, labels in the makespan's unit, light grid lines.
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
                              x, kTop, x, plot_bottom, x, plot_bottom, x, plot_bottom + 5, x,
                              plot_bottom + 18, absl::StrFormat("%.4g", t / unit.scale));
    }
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                          "text-anchor=\"middle\">time (%s)</text>\n",
                          kLeft + plot_width / 2, plot_bottom + 38, unit.name);

    // Bars.
    for (size_t lane = 0; lane < lanes.size(); ++lane) {
        for (const Bar& bar : lanes[lane]) {
            const exprog::SimTask& task = tasks[bar.task];
            const exprog::TaskTrace& trace = result.trace[bar.task];
            const double y = lane_top[lane] + kLanePad + bar.row * kRowHeight + 1;
            const double h = kRowHeight - 2;
            const double w = bar.x1 - bar.x0;
            const std::string what =
                task.kind == exprog::SimTask::Kind::aggregate
                    ? absl::StrCat("aggregate at GPU ", task.src_gpu)
                    : absl::StrCat("transfer ", task.src_gpu, " -> ", task.dst_gpu);
            const std::string tooltip = absl::StrCat(
                "task ", bar.task, ": ", what, ": ", task.label, "\n", format_duration(trace.start),
                " to ", format_duration(trace.end), ", ", format_bytes(trace.bytes), "\n",
                trace.resources.empty() ? "no resource" : absl::StrJoin(trace.resources, ", "));
            absl::StrAppendFormat(&svg,
                                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                                  "fill=\"%s\" stroke=\"%s\" stroke-width=\"0.5\">"
                                  "<title>%s</title></rect>\n",
                                  bar.x0, y, w, h, fill_of(bar.kind), stroke_of(bar.kind),
                                  xml_escape(tooltip));
            // The label inside the bar, when it fits.
            const std::string& label = task.label;
            if (!label.empty() && w >= kCharWidth * label.size() + 6) {
                absl::StrAppendFormat(
                    &svg, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"10\" fill=\"%s\">%s</text>\n",
                    bar.x0 + 3, y + h - 3.5, bar.kind == BarKind::send ? "white" : "black",
                    xml_escape(label));
            }
        }
    }
    svg += "</svg>\n";
    return svg;
}

} // namespace einsummable::tools
