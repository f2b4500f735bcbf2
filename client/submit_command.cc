#include "client/submit_command.h"

#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "client/coordinator_client.h"
#include "client/dataset_upload.h"
#include "client/model_flags.h"
#include "client/service_format.h"
#include "client/watch_command.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "planner/plan_search.h"
#include "rpc/text_proto_checks.h"
#include "wire/tensor_codec.h"

namespace slimfit::client {
namespace {

// The first error the text-format parser reports, 1-based.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

struct SubmitOptions {
  std::string spec_path;
  std::vector<std::string> data;
  std::vector<std::string> local_data;
  std::string trainable;
  double round_time_budget = 0;
  std::string data_type = "text";
  std::string separator;
  std::string init;
  std::string name;
  int64_t sequence_length = 0;
  int64_t tokens_per_round = 0;
  int64_t rounds = 0;
  double learning_rate = 0;
  std::string optimizer = "adamw";
  int64_t warmup_steps = 0;
  double weight_decay = 0;
  double gradient_clip_norm = 0;
  double init_readout_scale = 0;
  int64_t seed = 0;
  int64_t min_workers = 1;
  double held_out_fraction = 0;
  double verify_fraction = 0;
  int64_t quarantine_after = 0;
  int64_t local_steps = 0;
  double outer_learning_rate = 0;
  double outer_momentum = 0;
  std::string compress_pseudo_gradients;
  std::string compress_parameters;
  int64_t eval_interval = 0;
  int64_t checkpoint_interval = 10;
  std::string dtype = "float32";
  bool bf16_products = false;
  std::string request_id;
  bool watch = false;
  double reconnect_seconds = 60;
};

// NOT_FOUND (or the errno's code) unless `path` is a readable regular file: checked before anything
// is uploaded, so that a typo in the last --data does not leave the first ones uploaded for nothing.
absl::Status CheckReadable(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
  }
  if (!S_ISREG(info.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
  return absl::OkStatus();
}

// Writes the flags given over `spec`. INVALID_ARGUMENT naming the flag for a value the spec cannot
// hold; everything else is validated by the coordinator.
absl::Status ApplyFlags(const base::FlagSet& flags, const SubmitOptions& options,
                        const ModelShapeFlags& model, v1::JobSpec& spec) {
  if (flags.IsSet("name")) spec.set_name(options.name);
  if (flags.IsSet("sequence_length")) spec.set_sequence_length(options.sequence_length);
  if (flags.IsSet("tokens_per_round")) spec.set_tokens_per_round(options.tokens_per_round);
  if (flags.IsSet("rounds")) spec.set_rounds(options.rounds);

  v1::Optimizer& optimizer = *spec.mutable_optimizer();
  if (flags.IsSet("optimizer")) {
    const std::string kind = absl::AsciiStrToLower(options.optimizer);
    if (kind == "adamw") {
      if (!optimizer.has_adamw()) optimizer.mutable_adamw();
    } else if (kind == "sgd") {
      if (!optimizer.has_sgd()) optimizer.mutable_sgd();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--optimizer=", options.optimizer, ": expected adamw or sgd"));
    }
  } else if (optimizer.kind_case() == v1::Optimizer::KIND_NOT_SET) {
    optimizer.mutable_adamw();
  }
  if (flags.IsSet("learning_rate")) optimizer.set_learning_rate(options.learning_rate);
  if (flags.IsSet("warmup_steps")) optimizer.set_warmup_steps(options.warmup_steps);
  if (flags.IsSet("weight_decay")) optimizer.set_weight_decay(options.weight_decay);
  if (flags.IsSet("gradient_clip_norm")) optimizer.set_gradient_clip_norm(options.gradient_clip_norm);
  if (flags.IsSet("init_readout_scale"))
    spec.mutable_model()->set_init_readout_scale(options.init_readout_scale);

  if (flags.IsSet("seed")) {
    if (options.seed < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--seed=", options.seed, ": expected a non-negative integer"));
    }
    spec.set_seed(static_cast<uint64_t>(options.seed));
  }
  if (flags.IsSet("min_workers")) {
    if (options.min_workers < 1 || options.min_workers > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--min_workers=", options.min_workers, ": expected at least 1"));
    }
    spec.set_min_workers(static_cast<int32_t>(options.min_workers));
  }
  if (flags.IsSet("held_out_fraction")) spec.set_held_out_fraction(options.held_out_fraction);
  if (flags.IsSet("verify_fraction")) spec.set_verify_fraction(options.verify_fraction);
  if (flags.IsSet("quarantine_after")) {
    if (options.quarantine_after < 1 || options.quarantine_after > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--quarantine_after=", options.quarantine_after, ": expected at least 1"));
    }
    spec.set_quarantine_after(static_cast<int32_t>(options.quarantine_after));
  }
  if (flags.IsSet("local_steps")) {
    if (options.local_steps < 1 || options.local_steps > v1::LIMIT_MAX_LOCAL_STEPS) {
      return absl::InvalidArgumentError(
          absl::StrCat("--local_steps=", options.local_steps, ": expected 1 to ", v1::LIMIT_MAX_LOCAL_STEPS));
    }
    spec.set_local_steps(static_cast<int32_t>(options.local_steps));
  }
  if (flags.IsSet("outer_learning_rate") || flags.IsSet("outer_momentum")) {
    if (!spec.has_local_steps()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flags.IsSet("outer_learning_rate") ? "outer_learning_rate" : "outer_momentum",
                       ": only with --local_steps (or local_steps in the spec)"));
    }
    // The outer optimizer is SGD; the coordinator fills in what is not given (Nesterov momentum 0.9,
    // learning rate 0.7).
    v1::Optimizer& outer = *spec.mutable_outer_optimizer();
    if (outer.kind_case() == v1::Optimizer::KIND_NOT_SET) outer.mutable_sgd();
    if (flags.IsSet("outer_learning_rate")) outer.set_learning_rate(options.outer_learning_rate);
    if (flags.IsSet("outer_momentum")) {
      if (!outer.has_sgd())
        return absl::InvalidArgumentError("--outer_momentum: the spec's outer optimizer is not SGD");
      outer.mutable_sgd()->set_momentum(options.outer_momentum);
      outer.mutable_sgd()->set_nesterov(options.outer_momentum > 0);
    }
  }
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{
                                        "compress_pseudo_gradients", &options.compress_pseudo_gradients},
                                    {"compress_parameters", &options.compress_parameters}}) {
    if (!flags.IsSet(flag)) continue;
    absl::StatusOr<v1::Compression> compression =
        performer::CompressionFromName(absl::AsciiStrToLower(*value));
    if (!compression.ok())
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", compression.status().message()));
    if (std::string(flag) == "compress_parameters") {
      spec.mutable_compression()->set_parameters(*compression);
    } else if (*compression != v1::COMPRESSION_NONE && !spec.has_local_steps()) {
      return absl::InvalidArgumentError(
          "--compress_pseudo_gradients: only with --local_steps (synchronous rounds return exact gradients)");
    } else {
      spec.mutable_compression()->set_pseudo_gradients(*compression);
    }
  }
  if (flags.IsSet("eval_interval")) spec.set_eval_interval_rounds(options.eval_interval);
  if (flags.IsSet("checkpoint_interval")) spec.set_checkpoint_interval_rounds(options.checkpoint_interval);
  if (flags.IsSet("dtype")) {
    const std::string dtype = absl::AsciiStrToLower(options.dtype);
    if (dtype == "float32") {
      spec.set_dtype(v1::DTYPE_FLOAT32);
    } else if (dtype == "float64") {
      spec.set_dtype(v1::DTYPE_FLOAT64);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--dtype=", options.dtype, ": expected float32 or float64"));
    }
  }
  if (flags.IsSet("bf16_products")) spec.set_bf16_products(options.bf16_products);

  // The model: --init makes it a checkpoint whose config is whatever shape the spec and the flags
  // give; otherwise the flags refine the spec's config (or its checkpoint's), or make a fresh model.
  v1::ModelSpec& model_spec = *spec.mutable_model();
  if (!options.init.empty()) {
    v1::ModelConfig config = model_spec.has_config() ? model_spec.config() : model_spec.checkpoint().config();
    if (absl::Status s = model.Apply(&config); !s.ok()) return s;
    v1::CheckpointRef& checkpoint = *model_spec.mutable_checkpoint();
    checkpoint.Clear();
    if (config.ByteSizeLong() > 0) *checkpoint.mutable_config() = std::move(config);
  } else if (model_spec.has_checkpoint()) {
    if (model.AnySet()) {
      if (absl::Status s = model.Apply(model_spec.mutable_checkpoint()->mutable_config()); !s.ok()) return s;
    }
  } else {
    // A fresh model: the spec's config refined by the flags, or every field at its default.
    if (absl::Status s = model.Apply(model_spec.mutable_config()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string UploadLine(const UploadSource& source, const v1::DatasetInfo& info) {
  std::string line = absl::StrCat("uploaded ", source.path, " as ", info.dataset_id(), " (",
                                  planner::HumanBytes(static_cast<double>(info.total_bytes())));
  if (info.tokens() > 0) {
    absl::StrAppend(&line, ", ", FormatCount(info.tokens()), " tokens in ", FormatCount(info.documents()),
                    info.documents() == 1 ? " document" : " documents");
  }
  if (info.already_existed()) absl::StrAppend(&line, ", already on the coordinator");
  absl::StrAppend(&line, ")");
  return line;
}

}  // namespace

absl::StatusOr<v1::JobSpec> ReadJobSpec(const std::string& path) {
  if (absl::Status readable = CheckReadable(path); !readable.ok()) return readable;
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read the job spec"));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read the job spec"));
  v1::JobSpec spec;
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(contents.str(), &spec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", errors.first().empty() ? "1:1: not a text-format slimfit.v1.JobSpec" : errors.first()));
  }
  // Text format takes any bytes into a string field; the coordinator's parser takes only UTF-8.
  if (std::optional<std::string> field = rpc::FirstNonUtf8Field(spec); field.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", *field, " is not valid UTF-8"));
  }
  if (std::optional<std::string> field = rpc::FirstNonFiniteField(spec); field.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", *field, " is not a finite number"));
  }
  return spec;
}

std::string RandomRequestId() {
  absl::BitGen random;
  const uint64_t high = absl::Uniform<uint64_t>(random);
  const uint64_t low = absl::Uniform<uint64_t>(random);
  // Version 4 (random) in bits 76..79, variant 10 in bits 62..63.
  const uint64_t versioned_high = (high & ~uint64_t{0xF000}) | 0x4000;
  const uint64_t variant_low = (low & ~(uint64_t{0x3} << 62)) | (uint64_t{0x2} << 62);
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", versioned_high >> 32, (versioned_high >> 16) & 0xFFFF,
                         versioned_high & 0xFFFF, variant_low >> 48, variant_low & 0xFFFFFFFFFFFFULL);
}

absl::Status RunSubmitCommand(absl::Span<const std::string> args, std::ostream& out, bool terminal) {
  SubmitOptions options;
  CoordinatorOptions connection;
  base::FlagSet flags(
      "submit",
      "slimfit submit [JOB.textproto] [--data=FILE[,FILE...]]... [--local_data=NAME[,NAME...]]...\n"
      "           [--init=CHECKPOINT] [spec flags]\n"
      "           [model flags] [--request_id=ID] [--watch] [--json] [coordinator flags]",
      "Uploads the --data files (and an --init checkpoint) and submits a training job. The job\n"
      "spec is a text-format slimfit.v1.JobSpec (proto/slimfit.proto) and/or flags, which\n"
      "override it. Without a model in the spec, --init or model flags, the job trains a fresh\n"
      "model of the default shape; without an optimizer kind, AdamW. Prints the job's summary\n"
      "(--json: the Job); --watch then follows it as 'slimfit watch' does.");
  flags.Positional("JOB.textproto", &options.spec_path, "job spec, text-format slimfit.v1.JobSpec");
  flags.StringList("data", &options.data,
                   "dataset files to upload, appended to the spec's dataset_ids (repeatable)");
  flags.StringList("local_data", &options.local_data,
                   "datasets that stay on the workers holding them (slimfit-worker --data), by the name they "
                   "announced or their SHA-256 ('slimfit workers' lists them); appended to the spec's "
                   "local_datasets (repeatable)");
  flags.String(
      "trainable", &options.trainable,
      "train only these parameters (comma-separated name patterns, '*' any run), e.g. "
      "'layers.1.*,output_logit_map.*'; the rest stay as the model starts, and workers send and fetch "
      "only these (default: all)",
      base::FlagSet::kOptionalNoDefault);
  flags.String("data_type", &options.data_type,
               "text (every byte a token), or uint8, uint16, uint32 (pre-tokenised little-endian ids)");
  flags.String("separator", &options.separator,
               "bytes between documents in the --data files, with C escapes, e.g. '\\n\\n' (default: "
               "none, each file is one document)",
               base::FlagSet::kOptionalNoDefault);
  flags.String("init", &options.init, "start from this checkpoint: FILE.safetensors, or FILE.pt (torch.save)",
               base::FlagSet::kOptionalNoDefault);
  flags.String("name", &options.name, "job name (spec.name)", base::FlagSet::kOptionalNoDefault);
  flags.Int("sequence_length", &options.sequence_length, "tokens L per training sequence",
            base::FlagSet::kOptionalNoDefault);
  flags.Int("tokens_per_round", &options.tokens_per_round, "tokens per optimizer step (>= L)",
            base::FlagSet::kOptionalNoDefault);
  flags.Int("rounds", &options.rounds, "rounds (optimizer steps) to run", base::FlagSet::kOptionalNoDefault);
  flags.Double("learning_rate", &options.learning_rate,
               "peak learning rate (default for adamw: 3e-4; required for sgd)",
               base::FlagSet::kOptionalNoDefault);
  flags.String("optimizer", &options.optimizer, "adamw or sgd");
  flags.Int("warmup_steps", &options.warmup_steps,
            "steps of linear learning-rate warm-up (default: min(100, rounds/10), at least 1; 0: none)",
            base::FlagSet::kOptionalNoDefault);
  flags.Double("weight_decay", &options.weight_decay, "weight decay");
  flags.Double("gradient_clip_norm", &options.gradient_clip_norm, "clip the gradient to this L2 norm",
               base::FlagSet::kOptionalNoDefault);
  flags.Double("init_readout_scale", &options.init_readout_scale,
               "a fresh model's output map starts at PyTorch's draw times this (default 0.1; 1: the "
               "reference implementation's initialisation)",
               base::FlagSet::kOptionalNoDefault);
  flags.Int("seed", &options.seed, "seeds initialisation, data order and FAVOR+ features");
  flags.Int("min_workers", &options.min_workers, "workers needed before rounds start");
  flags.Double("held_out_fraction", &options.held_out_fraction,
               "fraction of the data held out for evaluation, [0, 0.5)");
  flags.Double("verify_fraction", &options.verify_fraction,
               "fraction of training shards a second worker also computes, compared before they count "
               "(default 0.05; 0: none)",
               base::FlagSet::kOptionalNoDefault);
  flags.Int("quarantine_after", &options.quarantine_after,
            "rejected results after which a worker gets no more shards of the job (default 3)",
            base::FlagSet::kOptionalNoDefault);
  flags.Int("local_steps", &options.local_steps,
            "local steps (DiLoCo): each round every worker takes this many steps of the optimizer on its own "
            "share of as many batches, and the coordinator averages what they moved with an outer optimizer "
            "(default: synchronous rounds, one exact gradient each)",
            base::FlagSet::kOptionalNoDefault);
  flags.Double(
      "round_time_budget", &options.round_time_budget,
      "with --local_steps: seconds per round; each worker takes the inner steps that fit (at least one), "
      "and one that has not answered by 1.5x this + 5 s is not waited for (default: every step, wait for "
      "all)",
      base::FlagSet::kOptionalNoDefault);
  flags.Double("outer_learning_rate", &options.outer_learning_rate,
               "with --local_steps: the outer SGD's learning rate (default 0.7; 1 with --outer_momentum=0 "
               "applies the workers' average as it is)",
               base::FlagSet::kOptionalNoDefault);
  flags.Double("outer_momentum", &options.outer_momentum,
               "with --local_steps: the outer SGD's Nesterov momentum (default 0.9; 0: none)",
               base::FlagSet::kOptionalNoDefault);
  flags.String("compress_pseudo_gradients", &options.compress_pseudo_gradients,
               "with --local_steps: how workers send what they moved: none, float16, bfloat16 or int8 (each "
               "worker keeps what the encoding loses and adds it to its next round; default none)",
               base::FlagSet::kOptionalNoDefault);
  flags.String(
      "compress_parameters", &options.compress_parameters,
      "how new parameter versions reach workers that hold the previous one: none, float16, bfloat16 or "
      "int8 differences (every worker rebuilds the same parameters; default none)",
      base::FlagSet::kOptionalNoDefault);
  flags.Int("eval_interval", &options.eval_interval,
            "evaluate every K rounds (0: only before the first and after the last)");
  flags.Int("checkpoint_interval", &options.checkpoint_interval, "checkpoint every K rounds");
  flags.String("dtype", &options.dtype, "float32 or float64");
  flags.Bool("bf16_products", &options.bf16_products,
             "mixed precision: the linear maps' products in bfloat16, everything else in float32 (float32 "
             "only; the gradient to bfloat16 rounding; on an H100 2.3x faster at d_model 1024)");
  ModelShapeFlags model(flags, "feature_map");
  flags.String("request_id", &options.request_id,
               "idempotency key: a retried submit with the same key returns the same job (default: random)",
               base::FlagSet::kOptionalNoDefault);
  flags.Bool("watch", &options.watch, "then follow the job as 'slimfit watch' does");
  AddReconnectFlag(flags, &options.reconnect_seconds);
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
  absl::StatusOr<absl::Duration> reconnect = ReconnectDuration(options.reconnect_seconds);
  if (!reconnect.ok()) return reconnect.status();

  // Everything local is checked before the first byte is sent.
  v1::JobSpec spec;
  if (!options.spec_path.empty()) {
    absl::StatusOr<v1::JobSpec> read = ReadJobSpec(options.spec_path);
    if (!read.ok()) return read.status();
    spec = *std::move(read);
  }
  if (absl::Status s = ApplyFlags(flags, options, model, spec); !s.ok()) return s;
  for (const std::string& local : options.local_data) spec.add_local_datasets(local);
  if (flags.IsSet("trainable")) spec.set_trainable(options.trainable);
  if (flags.IsSet("round_time_budget")) spec.set_round_time_budget_seconds(options.round_time_budget);
  if (spec.dataset_ids_size() == 0 && options.data.empty() && spec.local_datasets_size() == 0) {
    return absl::InvalidArgumentError(
        "no training data: give --data=FILE or --local_data=NAME (or dataset_ids or local_datasets in the "
        "job "
        "spec); see 'slimfit submit --help'");
  }
  std::vector<UploadSource> datasets;
  for (const std::string& path : options.data) {
    absl::StatusOr<UploadSource> source = DatasetSource(path, options.data_type, options.separator);
    if (!source.ok()) return source.status();
    if (absl::Status s = CheckReadable(path); !s.ok()) return s;
    datasets.push_back(*std::move(source));
  }
  std::optional<UploadSource> checkpoint;
  if (!options.init.empty()) {
    absl::StatusOr<UploadSource> source = CheckpointSource(options.init);
    if (!source.ok()) return source.status();
    if (absl::Status s = CheckReadable(options.init); !s.ok()) return s;
    checkpoint = *std::move(source);
  }
  const std::string request_id = flags.IsSet("request_id") ? options.request_id : RandomRequestId();

  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();
  std::vector<std::string> upload_lines;
  for (const UploadSource& source : datasets) {
    absl::StatusOr<v1::DatasetInfo> info = UploadFile(**client, source);
    if (!info.ok()) return info.status();
    spec.add_dataset_ids(info->dataset_id());
    upload_lines.push_back(UploadLine(source, *info));
  }
  if (checkpoint.has_value()) {
    absl::StatusOr<v1::DatasetInfo> info = UploadFile(**client, *checkpoint);
    if (!info.ok()) return info.status();
    spec.mutable_model()->mutable_checkpoint()->set_upload_id(info->dataset_id());
    upload_lines.push_back(UploadLine(*checkpoint, *info));
  }

  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_request_id(request_id);
  v1::Job job;
  absl::Status submitted = (*client)->Call(
      "SubmitJob", request_id.empty() ? Idempotency::kOnce : Idempotency::kIdempotent,
      [&](grpc::ClientContext* context) { return (*client)->stub().SubmitJob(context, request, &job); });
  if (!submitted.ok()) return submitted;

  if (connection.json) {
    out << ProtoToJson(job, /*pretty=*/!options.watch) << "\n" << std::flush;
  } else {
    for (const std::string& line : upload_lines) out << line << "\n";
    out << "submitted " << JobSummary(job) << "\n" << std::flush;
  }
  if (!options.watch) return absl::OkStatus();
  WatchOptions watch;
  watch.json = connection.json;
  watch.terminal = terminal && !connection.json;
  watch.reconnect = *reconnect;
  return WatchJob(**client, job.job_id(), watch, out);
}

}  // namespace slimfit::client
