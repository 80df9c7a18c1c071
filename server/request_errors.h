#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace einsummable::server {

// Why `bytes` do not parse as a message of `type`, as a client should hear it: InvalidArgument
// naming the first string field that is not UTF-8, as a path from the request down
// ("field graph.operators[0].attributes['equation'].string_value of
// einsummable.v1.RegisterModelRequest is not valid UTF-8 ..."), since proto3 parsing refuses
// such a field; else InvalidArgument saying the bytes are not a `type` at all. Call it only
// once parsing failed: it reads the bytes again, field by field.
absl::Status request_parse_error(const google::protobuf::Descriptor& type, absl::string_view bytes);

// `status` with `prefix` put before its message (which operator, tensor or step it concerns);
// the code is kept.
absl::Status with_prefix(const absl::Status& status, absl::string_view prefix);

} // namespace einsummable::server
