#pragma once

// The reference workloads (docs/workloads.md) as ir::Graph (library einsummable_workloads).
#include "compiler/workloads/by_name.h"
#include "compiler/workloads/ffn.h"
#include "compiler/workloads/llama.h"
#include "compiler/workloads/matrix_chain.h"
