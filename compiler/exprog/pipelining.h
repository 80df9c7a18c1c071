#pragma once

#include <vector>

#include "compiler/exprog/program.h"
#include "compiler/exprog/semantics.h"
#include "compiler/exprog/topology.h"

namespace einsummable::exprog {

// Program rewrites that make exchanges pipeline (docs/exprog.md "Chunks and order"): the
// synthesiser (synthesis.h) applies them to whole-atom programs and costs the results on the
// simulator like any other candidate. Each keeps the program's meaning: the same OUTs are met
// from the same INs.

// A directed ring through GPUs: each sends to the next, the last to the first. `bandwidth`: its
// narrowest hop, per direction.
struct Ring {
    std::vector<int> gpus;
    double bandwidth = 0.0;
};

// Rings through every GPU of `gpus` on `topology`. On a switch, one ring in the order given
// (every port then sends and receives one stream at full rate). On links, Hamiltonian cycles
// over NVLink only (never the bridge), found by exhaustive search for up to 12 GPUs and peeled
// greedily: the cycle whose narrowest link is widest, its bandwidth taken off each of its
// links, again until none is left; each cycle gives two rings, one per direction. Empty when
// there is no such cycle (or more GPUs than the search takes).
std::vector<Ring> topology_rings(const Topology& topology, const std::vector<int>& gpus);

// The same program with every relay chain `X @ a -> b -> c` written as single-hop actions
// `X @ a -> b` and `X @ b -> c` (a relay is a send from each GPU on the chain), so that ORDER
// can sequence every hop. Labels and ORDER are dropped.
Program split_relays(const Program& program);

// Every action of `program` split into `chunks` actions, one per chunk [j/chunks] of its chunk
// (a whole action's chunk j is [j/chunks]; one already chunked [i/k] becomes
// [i·chunks + j / k·chunks]). Labels and ORDER are dropped. chunks >= 1.
Program chunk_actions(const Program& program, int chunks);

// Labels every action that sends ("a0", "a1", ... by action index, unless it has a label) and
// adds ORDER chains so that, on each *port*, first-hop sends go one after another: on a switch
// a port is a GPU's egress; on links, one direction of one link (a multicast is in the chain of
// each of its first-hop links). A port's sends are sequenced by the round their action fires
// in the order-free closure (so a send never waits behind one that needs its data), then by
// rotation — (destination − source) mod the number of GPUs, in GPUS order — so that in every
// step the GPUs send to distinct destinations, then by chunk, then by action. Local
// aggregations are not ordered: they run as soon as their parts are present. Any ORDER the
// program had is replaced. On a cluster, a port is a GPU's sends inside its node or its NIC's to
// other nodes, and an action that sends on both is first split in two (one per port), so that
// the NIC's sends go one after another on their own: blocks then reach the other nodes one by
// one and are forwarded there while the rest still cross. Precondition: `program` is valid
// under `membership`.
Program order_sends(const Program& program, const Membership& membership, const Topology& topology);

} // namespace einsummable::exprog
