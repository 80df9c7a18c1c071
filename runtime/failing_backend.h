#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "runtime/backend.h"

namespace einsummable::runtime {

// A backend that fails beyond recovery, for testing on any machine what a sticky device error
// does (runtime::Backend::unrecoverable_error; on CUDA an illegal address, docs/cuda.md
// "Errors"): `backend`, whose executables' run() succeeds `runs` times in all (over every
// executable it prepares), then fails with `error`. From then on, as every CUDA call after a
// sticky error does, every run, write_buffer, read_buffer and prepare fails with `error`, and
// unrecoverable_error() returns it. The daemon's --fail_backend_after_runs_for_testing and
// tests/unit/server/engine_test.cc use it. `error` must not be OK.
std::shared_ptr<Backend> fail_unrecoverably_after(std::shared_ptr<Backend> backend, int64_t runs,
                                                  absl::Status error);

} // namespace einsummable::runtime
