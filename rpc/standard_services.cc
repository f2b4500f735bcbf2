#include "rpc/standard_services.h"

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/health_check_service_interface.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace slimfit::rpc {
namespace {

constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";
constexpr char kReflectionInfo[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

// The two messages built here hold one string field each; their wire form is written by hand so
// that no copy of gRPC's .proto files is needed.
std::string StringField(uint32_t number, const std::string& value) {
  std::string out;
  auto varint = [&out](uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  };
  varint((number << 3) | 2);  // length-delimited
  varint(value.size());
  out += value;
  return out;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& slice : slices)
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return out;
}

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// Waits for the completion of `tag`; false when the operation failed.
bool Await(grpc::CompletionQueue& queue, void* tag) {
  void* got = nullptr;
  bool ok = false;
  while (queue.Next(&got, &ok)) {
    if (got == tag) return ok;
  }
  return false;
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

}  // namespace

void EnableStandardServices() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
}

void SetServing(grpc::Server* server, const std::vector<std::string>& services, bool serving) {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  for (const std::string& service : services) health->SetServingStatus(service, serving);
}

absl::StatusOr<HealthStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                         const std::string& service, absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(Deadline(timeout));
  grpc::CompletionQueue queue;
  const grpc::ByteBuffer request = ToBuffer(service.empty() ? std::string() : StringField(1, service));
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, kHealthCheck, request, &queue);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  int tag = 0;
  call->Finish(&response, &status, &tag);
  Await(queue, &tag);
  queue.Shutdown();
  if (!status.ok()) return FromGrpc(status, absl::StrCat("health check of '", service, "'"));
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(FromBuffer(response))) {
    return absl::DataLossError("health check: the response does not parse");
  }
  HealthStatus result = HealthStatus::kUnknown;  // proto3: an absent field is 0
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = fields.field(i);
    if (field.number() == 1 && field.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      result = static_cast<HealthStatus>(field.varint());
    }
  }
  return result;
}

absl::StatusOr<std::vector<std::string>> ListServicesByReflection(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(Deadline(timeout));
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream =
      stub.PrepareCall(&context, kReflectionInfo, &queue);
  int start = 0, write = 0, done = 0, read = 0, finish = 0;
  stream->StartCall(&start);
  grpc::ByteBuffer response;
  bool answered = false;
  if (Await(queue, &start)) {
    stream->Write(ToBuffer(StringField(7, "*")), &write);  // list_services
    if (Await(queue, &write)) {
      stream->WritesDone(&done);
      Await(queue, &done);
      stream->Read(&response, &read);
      answered = Await(queue, &read);
    }
  }
  grpc::Status status;
  stream->Finish(&status, &finish);
  Await(queue, &finish);
  queue.Shutdown();
  if (!status.ok()) return FromGrpc(status, "server reflection");
  if (!answered) return absl::UnavailableError("server reflection: the stream ended without an answer");

  // ServerReflectionResponse.list_services_response (6) → ListServiceResponse.service (1, repeated)
  // → ServiceResponse.name (1).
  google::protobuf::UnknownFieldSet top;
  if (!top.ParseFromString(FromBuffer(response)))
    return absl::DataLossError("server reflection: unparsable answer");
  std::vector<std::string> names;
  for (int i = 0; i < top.field_count(); ++i) {
    const google::protobuf::UnknownField& list = top.field(i);
    if (list.number() == 7 && list.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      return absl::InternalError(
          absl::StrCat("server reflection answered with an error: ", list.length_delimited()));
    }
    if (list.number() != 6 || list.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    google::protobuf::UnknownFieldSet services;
    if (!services.ParseFromString(list.length_delimited())) continue;
    for (int j = 0; j < services.field_count(); ++j) {
      if (services.field(j).number() != 1 ||
          services.field(j).type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
        continue;
      }
      google::protobuf::UnknownFieldSet service;
      if (!service.ParseFromString(services.field(j).length_delimited())) continue;
      for (int k = 0; k < service.field_count(); ++k) {
        if (service.field(k).number() == 1 &&
            service.field(k).type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
          names.push_back(service.field(k).length_delimited());
        }
      }
    }
  }
  return names;
}

}  // namespace slimfit::rpc
