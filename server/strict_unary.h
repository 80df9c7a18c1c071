#pragma once

// Unary (and server-streaming) methods whose request does not parse get INVALID_ARGUMENT naming
// the field, not gRPC's INTERNAL with an empty message.
//
// Protobuf refuses a proto3 string field that is not UTF-8, and gRPC's generated handler then
// answers INTERNAL, InitializationErrorString() (empty for proto3), before the method runs: the
// client cannot tell its own mistake from a server fault. The wire contract stays as it is
// (string fields stay string, and so must be UTF-8); only the server's handling changes: the
// method's handler reads the request as bytes and parses it itself, and on failure says why
// (request_errors.h). gRPC's own API for that is its "streamed unary" form (what the generated
// WithStreamedUnaryMethod_ uses): the method is served as a stream of one request and one reply,
// which on the wire is the same call. One difference: the handler's thread is taken when the
// call starts, not once the request has arrived, so it waits while a slow client sends it.

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/method_handler.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/request_errors.h"

namespace einsummable::server {

// Parses the serialized `buffer` into `request`; on failure request_parse_error's status.
template <class Request>
absl::Status parse_request(grpc::ByteBuffer& buffer, Request& request) {
    {
        grpc::ProtoBufferReader reader(&buffer);
        if (reader.status().ok() && request.ParseFromZeroCopyStream(&reader)) {
            return absl::OkStatus();
        }
    }
    grpc::Slice whole;
    if (!buffer.DumpToSingleSlice(&whole).ok()) {
        return absl::InvalidArgumentError("the request message could not be read");
    }
    return request_parse_error(
        *Request::descriptor(),
        absl::string_view(reinterpret_cast<const char*>(whole.begin()), whole.size()));
}

// The call's one request, read from `stream` as bytes and parsed by parse_request; its error
// as a gRPC status (INVALID_ARGUMENT naming the field, or the call carried no message: the
// client half-closed without one, or went away).
template <class Stream, class Request>
grpc::Status read_request(Stream& stream, Request& request) {
    grpc::ByteBuffer bytes;
    if (!stream.Read(&bytes)) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "the call carried no request message");
    }
    if (const absl::Status parsed = parse_request(bytes, request); !parsed.ok()) {
        return grpc::Status(static_cast<grpc::StatusCode>(parsed.code()),
                            std::string(parsed.message()));
    }
    return grpc::Status::OK;
}

// The handler of a unary method of `Service` whose request parse_request parses: gRPC's
// streamed-unary handler over bytes (one request read, one reply written, as a unary call),
// which calls `method` as the generated handler would. To install with grpc::Service's
// MarkMethodStreamed (protected: the service's constructor calls it) at method_index(...).
template <class Service, class Request, class Response>
class StrictUnaryHandler final
    : public grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer> {
public:
    using Method = grpc::Status (Service::*)(grpc::ServerContext*, const Request*, Response*);
    using Stream = grpc::ServerUnaryStreamer<grpc::ByteBuffer, grpc::ByteBuffer>;

    StrictUnaryHandler(Service* service, Method method)
        : grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
              [service, method](grpc::ServerContext* context, Stream* stream) {
                  return serve(*service, method, context, *stream);
              }) {}

private:
    static grpc::Status serve(Service& service, Method method, grpc::ServerContext* context,
                              Stream& stream) {
        Request request;
        if (grpc::Status read = read_request(stream, request); !read.ok()) {
            return read;
        }
        Response response;
        if (grpc::Status status = (service.*method)(context, &request, &response); !status.ok()) {
            return status;
        }
        grpc::ByteBuffer reply;
        bool own_buffer = false;
        if (grpc::Status status =
                grpc::SerializationTraits<Response>::Serialize(response, &reply, &own_buffer);
            !status.ok()) {
            return status;
        }
        stream.Write(reply);
        return grpc::Status::OK;
    }
};

// The same for a server-streaming method (Generate): gRPC's split-streamed handler over a byte
// request (one request read, any number of replies written), which parses the request as
// parse_request does and hands it to `serve` with a writer of the replies (false once the
// client is gone).
template <class Request, class Response>
class StrictServerStreamingHandler final
    : public grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer, Response> {
public:
    using Write = std::function<bool(const Response&)>;
    using Serve = std::function<grpc::Status(grpc::ServerContext*, const Request&, const Write&)>;
    using Stream = grpc::ServerSplitStreamer<grpc::ByteBuffer, Response>;

    explicit StrictServerStreamingHandler(Serve serve)
        : grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer, Response>(
              [serve = std::move(serve)](grpc::ServerContext* context, Stream* stream) {
                  Request request;
                  if (grpc::Status read = read_request(*stream, request); !read.ok()) {
                      return read;
                  }
                  return serve(context, request,
                               [stream](const Response& reply) { return stream->Write(reply); });
              }) {}
};

// Method `name` of `service` in the generated descriptors (the generated code knows no names at
// run time; the descriptor does); null when there is none.
inline const google::protobuf::MethodDescriptor* find_method(absl::string_view service,
                                                             absl::string_view name) {
    const google::protobuf::ServiceDescriptor* found_service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
    return found_service == nullptr ? nullptr : found_service->FindMethodByName(std::string(name));
}

// The index of server-streaming method `name` of `service`, checked to take Request and stream
// Response.
template <class Request, class Response>
int streaming_method_index(const StrictServerStreamingHandler<Request, Response>& /*handler*/,
                           absl::string_view service, absl::string_view name) {
    const google::protobuf::MethodDescriptor* method = find_method(service, name);
    GPR_ASSERT(method != nullptr && !method->client_streaming() && method->server_streaming() &&
               method->input_type() == Request::descriptor() &&
               method->output_type() == Response::descriptor());
    return method->index();
}

// A StrictUnaryHandler for `method` of `service`.
template <class Service, class Request, class Response>
std::unique_ptr<StrictUnaryHandler<Service, Request, Response>>
strict_unary(Service* service,
             grpc::Status (Service::*method)(grpc::ServerContext*, const Request*, Response*)) {
    return std::make_unique<StrictUnaryHandler<Service, Request, Response>>(service, method);
}

// The index the generated service gives method `name` of `service` (the order of the .proto),
// checked to be a unary method taking Request and returning Response.
template <class Service, class Request, class Response>
int method_index(const StrictUnaryHandler<Service, Request, Response>& /*handler*/,
                 absl::string_view service, absl::string_view name) {
    const google::protobuf::MethodDescriptor* method = find_method(service, name);
    GPR_ASSERT(method != nullptr && !method->client_streaming() && !method->server_streaming() &&
               method->input_type() == Request::descriptor() &&
               method->output_type() == Response::descriptor());
    return method->index();
}

} // namespace einsummable::server
