#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace einsummable::server {

// What a status message may carry to a client: gRPC sends it in a header (trailer metadata), and
// one longer than the peer's metadata limit turns the call's status into RESOURCE_EXHAUSTED
// ("received metadata size exceeds hard limit"), hiding the real code. 1 KiB keeps every message
// whole that names a few tensors or operators.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// `message` cut to at most `limit` bytes (never inside a UTF-8 character), ending with
// " …and N more bytes" when it was cut; unchanged when it fits.
std::string truncate_message(absl::string_view message, size_t limit = kMaxStatusMessageBytes);

// `text` fit for one log line: control characters (bytes below 0x20 and 0x7f) as \xNN, the rest
// as is, so a name or a message from a client cannot start a forged line.
std::string printable(absl::string_view text);

} // namespace einsummable::server
