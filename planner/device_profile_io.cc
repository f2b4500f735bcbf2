#include "planner/device_profile_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "rpc/text_proto_checks.h"

namespace slimfit::planner {
namespace {

// Keeps every error TextFormat reports, with 1-based positions (TextFormat's are 0-based).
class CollectingErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    errors_.push_back(absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message));
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

// Whether `proto` is read through the superseded bf16_time_ratio (DeviceProfileFromProto).
bool ReadsBf16TimeRatio(const v1::DeviceProfile& proto) {
  return proto.has_bf16_time_ratio() && !proto.has_bf16_flops_per_second();
}

}  // namespace

v1::DeviceProfile DeviceProfileToProto(const DeviceProfile& profile) {
  v1::DeviceProfile proto;
  proto.set_device(profile.device);
  proto.set_device_name(profile.device_name);
  proto.set_threads(profile.threads);
  proto.set_total_memory_bytes(profile.total_memory_bytes);
  proto.set_activation_scale(profile.activation_scale);
  proto.set_activation_overhead_bytes(profile.activation_overhead_bytes);
  proto.set_resident_overhead_bytes(profile.resident_overhead_bytes);
  proto.set_forward_weight_copies(profile.forward_weight_copies);
  proto.set_replays_slices(profile.replays_slices);
  proto.set_graph_pool_overhead_bytes(profile.graph_pool_overhead_bytes);
  proto.set_flops_per_second(profile.flops_per_second);
  proto.set_half_rate_rows(profile.half_rate_rows);
  proto.set_layer_overhead_s(profile.layer_overhead_s);
  proto.set_backward_factor(profile.backward_factor);
  proto.set_bf16_flops_per_second(profile.bf16_flops_per_second);
  proto.set_bf16_half_rate_rows(profile.bf16_half_rate_rows);
  proto.set_bf16_layer_overhead_s(profile.bf16_layer_overhead_s);
  proto.set_seconds_per_element(profile.seconds_per_element);
  return proto;
}

DeviceProfile DeviceProfileFromProto(const v1::DeviceProfile& proto) {
  DeviceProfile profile;
  if (proto.has_device()) profile.device = proto.device();
  if (proto.has_device_name()) profile.device_name = proto.device_name();
  if (proto.has_threads()) profile.threads = proto.threads();
  if (proto.has_total_memory_bytes()) profile.total_memory_bytes = proto.total_memory_bytes();
  if (proto.has_activation_scale()) profile.activation_scale = proto.activation_scale();
  if (proto.has_activation_overhead_bytes()) {
    profile.activation_overhead_bytes = proto.activation_overhead_bytes();
  }
  if (proto.has_resident_overhead_bytes()) profile.resident_overhead_bytes = proto.resident_overhead_bytes();
  if (proto.has_forward_weight_copies()) profile.forward_weight_copies = proto.forward_weight_copies();
  if (proto.has_replays_slices()) profile.replays_slices = proto.replays_slices();
  if (proto.has_graph_pool_overhead_bytes())
    profile.graph_pool_overhead_bytes = proto.graph_pool_overhead_bytes();
  if (proto.has_flops_per_second()) profile.flops_per_second = proto.flops_per_second();
  if (proto.has_half_rate_rows()) profile.half_rate_rows = proto.half_rate_rows();
  if (proto.has_layer_overhead_s()) profile.layer_overhead_s = proto.layer_overhead_s();
  if (proto.has_backward_factor()) profile.backward_factor = proto.backward_factor();
  if (proto.has_seconds_per_element()) profile.seconds_per_element = proto.seconds_per_element();
  if (proto.has_bf16_flops_per_second()) profile.bf16_flops_per_second = proto.bf16_flops_per_second();
  if (proto.has_bf16_half_rate_rows()) profile.bf16_half_rate_rows = proto.bf16_half_rate_rows();
  if (proto.has_bf16_layer_overhead_s()) profile.bf16_layer_overhead_s = proto.bf16_layer_overhead_s();
  if (ReadsBf16TimeRatio(proto) && proto.bf16_time_ratio() > 0) {
    // A profile from before engine revision 8: its whole-call ratio on the products' rate.
    profile.bf16_flops_per_second = profile.flops_per_second / proto.bf16_time_ratio();
    profile.bf16_half_rate_rows = profile.half_rate_rows;
    profile.bf16_layer_overhead_s = profile.layer_overhead_s;
  }
  return profile;
}

absl::StatusOr<DeviceProfile> CheckedDeviceProfileFromProto(const v1::DeviceProfile& proto) {
  // Bounds no device comes near, checked here so that the refusal names the field given (an
  // infinite ratio would read as unmeasured, a vanishing one as an infinite rate).
  if (ReadsBf16TimeRatio(proto) && !(proto.bf16_time_ratio() >= 1e-3 && proto.bf16_time_ratio() <= 1e3)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device profile: bf16_time_ratio must be in [0.001, 1000], got ", proto.bf16_time_ratio()));
  }
  DeviceProfile profile = DeviceProfileFromProto(proto);
  if (absl::Status valid = profile.Validate(); !valid.ok()) return valid;
  return profile;
}

absl::StatusOr<DeviceProfile> ParseDeviceProfileText(absl::string_view text) {
  v1::DeviceProfile proto;
  CollectingErrorCollector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  // TextFormat reports a message once with every error it found; the first is the one to fix.
  if (!parser.ParseFromString(std::string(text), &proto)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device profile: ", errors.errors().empty()
                                             ? std::string("not a text-format slimfit.v1.DeviceProfile")
                                             : absl::StrJoin(errors.errors(), "; ")));
  }
  // Text format takes any bytes into a string field; a worker sends its profile to the
  // coordinator, whose parser takes only UTF-8.
  if (std::optional<std::string> field = rpc::FirstNonUtf8Field(proto); field.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("device profile: ", *field, " is not valid UTF-8"));
  }
  if (std::optional<std::string> field = rpc::FirstNonFiniteField(proto); field.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("device profile: ", *field, " is not a finite number"));
  }
  return CheckedDeviceProfileFromProto(proto);
}

std::string DeviceProfileToText(const DeviceProfile& profile) {
  std::string text;
  google::protobuf::TextFormat::Printer printer;
  // Printing a message we just built cannot fail.
  printer.PrintToString(DeviceProfileToProto(profile), &text);
  return text;
}

absl::StatusOr<DeviceProfile> ReadDeviceProfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error_number = errno;
    return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": cannot open device profile"));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::InternalError(absl::StrCat(path, ": cannot read device profile"));
  }
  absl::StatusOr<DeviceProfile> profile = ParseDeviceProfileText(contents.str());
  if (!profile.ok()) {
    return absl::Status(profile.status().code(), absl::StrCat(path, ": ", profile.status().message()));
  }
  return profile;
}

absl::Status WriteDeviceProfile(const std::string& path, const DeviceProfile& profile) {
  if (absl::Status valid = profile.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": refusing to write an invalid profile: ", valid.message()));
  }
  return base::WriteFileAtomically(path, DeviceProfileToText(profile));
}

}  // namespace slimfit::planner
