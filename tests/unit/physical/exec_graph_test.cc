// compiler/physical: buffer views in the ExecGraph (Buffer::parent) — the contiguity rule, the
// lowering pass that makes them (use_views), the memory plan that keeps their roots alive, and
// what check_exec_graph refuses.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/physical/lower.h"
#include "gtest/gtest.h"

namespace einsummable::physical {
namespace {

ir::Box box(std::vector<ir::Interval> dims) {
    return ir::Box(std::move(dims));
}

TEST(ContiguousOffset, IsTheRowMajorPositionOfAContiguousRunAndNothingElse) {
    const ir::Box whole = box({{0, 4}, {0, 8}});
    EXPECT_EQ(contiguous_offset(whole, whole), 0);
    EXPECT_EQ(contiguous_offset(whole, box({{1, 3}, {0, 8}})), 8);            // whole rows
    EXPECT_EQ(contiguous_offset(whole, box({{1, 2}, {2, 5}})), 10);           // part of one row
    EXPECT_EQ(contiguous_offset(whole, box({{1, 3}, {0, 4}})), std::nullopt); // strided
    EXPECT_EQ(contiguous_offset(whole, box({{3, 5}, {0, 8}})), std::nullopt); // not inside
    EXPECT_EQ(contiguous_offset(box({{2, 6}, {0, 8}}), box({{3, 4}, {0, 8}})), 8); // offsets
    // Leading dimensions of one element do not break contiguity.
    EXPECT_EQ(contiguous_offset(box({{0, 2}, {0, 3}, {0, 4}}), box({{1, 2}, {1, 3}, {0, 4}})), 16);
    EXPECT_EQ(contiguous_offset(box({{0, 2}, {0, 3}, {0, 4}}), box({{0, 2}, {1, 2}, {0, 4}})),
              std::nullopt);
}

// One device: x (a persistent input) is split into two row halves, each "aggregated" (a copy on
// the device, aggregation none) into its half of y, which a last node reads whole. Written with
// slices and a concat; use_views turns them into views.
ExecGraph halves() {
    ExecGraph graph;
    graph.devices = 1;
    auto add = [&](const std::string& tensor, ir::Box b, bool persistent = false) {
        Buffer buffer;
        buffer.box = std::move(b);
        buffer.tensor = tensor;
        buffer.persistent = persistent;
        graph.buffers.push_back(buffer);
        return static_cast<BufferId>(graph.buffers.size()) - 1;
    };
    auto node = [&](NodeKind kind, std::vector<BufferId> in, std::vector<BufferId> out,
                    std::vector<int> deps) {
        ExecNode n;
        n.kind = kind;
        n.inputs = std::move(in);
        n.outputs = std::move(out);
        n.deps = std::move(deps);
        graph.nodes.push_back(std::move(n));
    };
    const BufferId x = add("x", box({{0, 4}, {0, 8}}), /*persistent=*/true); // b0
    const BufferId x_top = add("x", box({{0, 2}, {0, 8}}));                  // b1
    const BufferId x_bottom = add("x", box({{2, 4}, {0, 8}}));               // b2
    const BufferId y_top = add("y", box({{0, 2}, {0, 8}}));                  // b3
    const BufferId y_bottom = add("y", box({{2, 4}, {0, 8}}));               // b4
    const BufferId y = add("y", box({{0, 4}, {0, 8}}));                      // b5
    const BufferId z = add("z", box({{0, 4}, {0, 8}}));                      // b6
    const BufferId x_left = add("x", box({{0, 4}, {0, 4}}));                 // b7: strided
    const BufferId w = add("w", box({{0, 4}, {0, 4}}));                      // b8
    graph.input_blocks["x"] = {x};
    node(NodeKind::slice, {x}, {x_top}, {});                // n0
    node(NodeKind::slice, {x}, {x_bottom}, {});             // n1
    node(NodeKind::aggregate, {x_top}, {y_top}, {0});       // n2
    node(NodeKind::aggregate, {x_bottom}, {y_bottom}, {1}); // n3
    node(NodeKind::concat, {y_top, y_bottom}, {y}, {2, 3}); // n4
    node(NodeKind::aggregate, {y}, {z}, {4});               // n5
    node(NodeKind::slice, {x}, {x_left}, {});               // n6
    node(NodeKind::aggregate, {x_left}, {w}, {6});          // n7
    return graph;
}

TEST(UseViews, ContiguousSlicesAndInPlaceConcatsBecomeViewsStridedSlicesStay) {
    ExecGraph graph = halves();
    use_views(graph);
    // n0, n1 (contiguous slices) and n4 (the concat) are gone; n6 (strided) stays.
    ASSERT_EQ(graph.nodes.size(), 5u);
    EXPECT_EQ(graph.buffers[1].parent, 0);
    EXPECT_EQ(graph.buffers[2].parent, 0);
    EXPECT_EQ(graph.buffers[3].parent, 5);
    EXPECT_EQ(graph.buffers[4].parent, 5);
    EXPECT_FALSE(graph.buffers[7].is_view());
    EXPECT_TRUE(graph.buffers[1].persistent) << "a view takes its root's flags";
    EXPECT_EQ(graph.view_root(1), 0);
    // The aggregates wait for nothing now (their slices are views of a loaded input); the
    // reader of y waits for both halves' writers, through the removed concat.
    EXPECT_EQ(graph.nodes[0].kind, NodeKind::aggregate);
    EXPECT_TRUE(graph.nodes[0].deps.empty());
    EXPECT_EQ(graph.nodes[2].inputs, std::vector<BufferId>{5});
    EXPECT_EQ(graph.nodes[2].deps, (std::vector<int>{0, 1}));
    EXPECT_EQ(graph.nodes[3].kind, NodeKind::slice);
    EXPECT_EQ(graph.nodes[4].deps, std::vector<int>{3});

    ASSERT_TRUE(plan_memory(graph).ok());
    EXPECT_EQ(graph.buffers[4].offset, graph.buffers[5].offset + 2 * 8 * 4);
    EXPECT_EQ(graph.buffers[2].offset, graph.buffers[0].offset + 2 * 8 * 4);
    const absl::Status checked = check_exec_graph(graph, 1);
    EXPECT_TRUE(checked.ok()) << checked;
    EXPECT_TRUE(absl::StrContains(graph.to_string(), "view of b5")) << graph.to_string();
}

TEST(UseViews, TheRootLivesFromItsFirstViewWriterToItsLastReader) {
    ExecGraph graph = halves();
    use_views(graph);
    ASSERT_TRUE(plan_memory(graph).ok());
    // y (b5) is written at nodes 0 and 1 through its views and read at node 2: z (b6), written
    // at node 2, must not take its bytes; w (b8) may, once y is dead.
    const Buffer& y = graph.buffers[5];
    const Buffer& z = graph.buffers[6];
    EXPECT_TRUE(z.offset >= y.offset + y.bytes() || y.offset >= z.offset + z.bytes());
}

ExecGraph checked_halves() {
    ExecGraph graph = halves();
    use_views(graph);
    EXPECT_TRUE(plan_memory(graph).ok());
    EXPECT_TRUE(check_exec_graph(graph, 1).ok());
    return graph;
}

void expect_refused(const ExecGraph& graph, const std::string& message) {
    const absl::Status status = check_exec_graph(graph, 1);
    EXPECT_FALSE(status.ok()) << "accepted; wanted: " << message;
    EXPECT_TRUE(absl::StrContains(status.message(), message)) << status;
}

TEST(CheckExecGraph, RefusesViewsOutOfPlaceOrOutsideTheirParent) {
    {
        ExecGraph graph = checked_halves();
        graph.buffers[4].offset += 4;
        expect_refused(graph, "at offset");
    }
    {
        ExecGraph graph = checked_halves();
        graph.buffers[4].box = box({{2, 4}, {0, 4}}); // strided inside y
        expect_refused(graph, "not one contiguous run inside it");
    }
    {
        ExecGraph graph = checked_halves();
        graph.buffers[4].box = box({{3, 5}, {0, 8}}); // leaves y
        expect_refused(graph, "not one contiguous run inside it");
    }
    {
        ExecGraph graph = checked_halves();
        graph.buffers[4].dtype = ir::DType::f16;
        expect_refused(graph, "on another device or in another dtype");
    }
    {
        ExecGraph graph = checked_halves();
        graph.buffers[5].parent = 4; // y inside its own half
        expect_refused(graph, "cycle");
    }
    {
        ExecGraph graph = checked_halves();
        graph.buffers[3].persistent = true;
        expect_refused(graph, "persistent or resident flag differs");
    }
    {
        ExecGraph graph = checked_halves();
        graph.buffers[3].parent = 99;
        expect_refused(graph, "which does not exist");
    }
}

TEST(CheckExecGraph, RefusesAViewWhoseParentsBytesAreReusedWhileItIsInUse) {
    // Reuse once the root is dead is fine: the strided slice's b7 (written at node 3, after
    // y's last reader) takes y's bytes in the memory plan, and the graph is accepted.
    ExecGraph graph = checked_halves();
    EXPECT_EQ(graph.buffers[7].offset, graph.buffers[5].offset);
    // The strided slice (node 3, writing b7) moved before y's last reader, onto y's bytes:
    // y's first half is written (node 0) and read (node 2) around it.
    ExecGraph early = checked_halves();
    std::swap(early.nodes[1], early.nodes[3]); // now: agg, slice(b7), agg, ...
    early.nodes[1].deps.clear();
    early.nodes[3].deps.clear();
    early.nodes[4].deps = {1};
    early.buffers[7].offset = early.buffers[5].offset;
    expect_refused(early, "the parent of views, shares arena bytes with");
}

} // namespace
} // namespace einsummable::physical
