#include "client/coordinator_plan_command.h"

#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "client/coordinator_client.h"
#include "client/model_flags.h"
#include "client/service_format.h"
#include "client/text_table.h"
#include "planner/cost_model.h"
#include "planner/plan_search.h"

namespace slimfit::client {
namespace {

// Flags of the offline `slimfit plan` that describe this machine rather than a worker.
constexpr absl::string_view kOfflineOnlyFlags[] = {"arch",    "profile",       "device",
                                                   "threads", "memory_budget", "optimizer"};

struct CoordinatorPlanOptions {
  std::string worker;
  bool all = false;
  std::string job;
  int64_t seq_len = 0;
  int64_t documents = 1;
  std::string objective = "time";
  std::string dtype = "float32";
  bool bf16_products = false;
  double safety_margin = 0.10;
  bool frontier = false;
};

// The flag name of "--name", "--name=value" or "--noname"; "" for anything else.
absl::string_view FlagName(absl::string_view arg) {
  if (!absl::StartsWith(arg, "--") || arg == "--") return "";
  absl::string_view body = arg.substr(2);
  return body.substr(0, body.find('='));
}

std::string Seconds(double seconds) { return absl::StrFormat("%.3g s", seconds); }

int64_t PeakOf(const v1::PlanCandidate& candidate) {
  return candidate.prediction().peak_bytes() > 0 ? candidate.prediction().peak_bytes()
                                                 : candidate.plan().predicted_peak_bytes();
}

double SecondsOf(const v1::PlanCandidate& candidate) {
  return candidate.prediction().seconds() > 0 ? candidate.prediction().seconds()
                                              : candidate.plan().predicted_time_seconds();
}

std::string Bytes(int64_t bytes) { return planner::HumanBytes(static_cast<double>(bytes)); }

std::string ObjectiveName(v1::Objective objective) {
  return objective == v1::OBJECTIVE_MEMORY ? "memory" : "time";
}

}  // namespace

bool IsCoordinatorPlan(absl::Span<const std::string> args) {
  for (const std::string& arg : args) {
    if (arg == "--worker" || absl::StartsWith(arg, "--worker=") || arg == "--all") return true;
    if (absl::StartsWith(arg, "--all=")) {
      const std::string value = absl::AsciiStrToLower(arg.substr(6));
      if (value != "false" && value != "0" && value != "no") return true;
    }
  }
  return false;
}

std::string FormatMemoryPlan(const v1::MemoryPlan& plan) {
  std::string text =
      absl::StrFormat("worker %s: budget %s (%s usable), L = %d, %d document%s, objective %s\n",
                      plan.worker_id().empty() ? "(unregistered)" : plan.worker_id(),
                      Bytes(plan.memory_budget_bytes()), Bytes(plan.usable_bytes()), plan.sequence_length(),
                      plan.documents(), plan.documents() == 1 ? "" : "s", ObjectiveName(plan.objective()));
  auto field = [&text](absl::string_view label, const std::string& value) {
    absl::StrAppendFormat(&text, "  %-15s %s\n", label, value);
  };
  if (plan.has_refusal()) {
    field("refused", plan.refusal());
    if (plan.has_least_peak_bytes()) field("least peak", Bytes(plan.least_peak_bytes()));
  } else {
    field("chosen", PlanSummaryOf(plan.chosen().plan()));
    field("predicted", absl::StrCat("peak ", Bytes(PeakOf(plan.chosen())), ", ",
                                    Seconds(SecondsOf(plan.chosen())), " per sequence"));
    if (!plan.reason().empty()) field("reason", plan.reason());
  }
  if (plan.has_full_backprop()) {
    const int64_t peak = PeakOf(plan.full_backprop());
    field(
        "full backprop",
        absl::StrCat("peak ", Bytes(peak), ", ", Seconds(SecondsOf(plan.full_backprop())), " per sequence (",
                     peak <= plan.usable_bytes() ? "fits" : "does not fit", " the budget)"));
  }
  if (plan.frontier_size() > 0) {
    absl::StrAppendFormat(&text, "  Pareto frontier: %d plans of %d candidates (* chosen)\n",
                          plan.frontier_size(), plan.candidates_considered());
    TextTable table({{""}, {"PLAN"}, {"PEAK", TextTable::kRight}, {"TIME", TextTable::kRight}});
    for (const v1::PlanCandidate& candidate : plan.frontier()) {
      const bool chosen = plan.has_chosen() &&
                          candidate.plan().SerializeAsString() == plan.chosen().plan().SerializeAsString();
      table.AddRow({chosen ? "*" : "", PlanSummaryOf(candidate.plan()), Bytes(PeakOf(candidate)),
                    Seconds(SecondsOf(candidate))});
    }
    std::string rendered = table.Render();
    for (absl::string_view line : absl::StrSplit(rendered, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&text, "  ", line, "\n");
    }
  }
  return text;
}

absl::Status RunCoordinatorPlanCommand(absl::Span<const std::string> args, std::ostream& out) {
  for (const std::string& arg : args) {
    const absl::string_view name = FlagName(arg);
    for (absl::string_view offline : kOfflineOnlyFlags) {
      if (name == offline) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", name,
            " belongs to the offline 'slimfit plan' (a device described here); with --worker or --all "
            "the coordinator plans with each worker's own profile and budget: drop --",
            name, ", or drop --worker/--all"));
      }
    }
  }
  CoordinatorPlanOptions options;
  CoordinatorOptions connection;
  base::FlagSet flags(
      "plan",
      "slimfit plan (--worker=ID | --all) (--job=ID | [model flags] --seq_len=L [--documents=D])\n"
      "           [--objective=time|memory] [--dtype=float32] [--safety_margin=X] [--frontier] [--json]\n"
      "           [coordinator flags]",
      "What the coordinator's planner chooses for a registered worker (or every live one) with\n"
      "that worker's own profile and budget: the plan, its predicted peak and time, ordinary\n"
      "back-propagation's needs, or why nothing fits. Without --worker or --all, 'slimfit plan'\n"
      "plans offline for a device described by flags (see 'slimfit plan --help').");
  flags.String("worker", &options.worker, "plan for this worker", base::FlagSet::kOptionalNoDefault);
  flags.Bool("all", &options.all, "plan for every live worker");
  flags.String("job", &options.job, "the workload of this job (its model, L, dtype, documents per sequence)",
               base::FlagSet::kOptionalNoDefault);
  ModelShapeFlags model(flags, "features");
  flags.Int("seq_len", &options.seq_len, "tokens L in the packed sequence (without --job)",
            base::FlagSet::kOptionalNoDefault);
  flags.Int("documents", &options.documents, "documents packed into the L tokens (without --job)");
  flags.String("objective", &options.objective, "time (fastest plan that fits) or memory (least peak)");
  flags.String("dtype", &options.dtype, "float32 or float64 (with --job: the job's, if given)");
  flags.Bool("bf16_products", &options.bf16_products,
             "plans with bfloat16 products (float32 only; with --job: the job's, if given)");
  flags.Double("safety_margin", &options.safety_margin,
               "fraction of each budget kept free: predicted peaks stay under (1 - margin) * budget");
  flags.Bool("frontier", &options.frontier,
             "include the Pareto frontier (the coordinator's default: with --worker only)");
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;

  v1::GetMemoryPlanRequest request;
  if (flags.IsSet("worker") == options.all) {
    return absl::InvalidArgumentError("give exactly one of --worker=ID and --all");
  }
  if (options.all) {
    request.set_all_workers(true);
  } else if (options.worker.empty()) {
    return absl::InvalidArgumentError("--worker needs a worker id (see 'slimfit workers')");
  } else {
    request.set_worker_id(options.worker);
  }
  if (flags.IsSet("job")) {
    if (options.job.empty()) return absl::InvalidArgumentError("--job needs a job id (see 'slimfit jobs')");
    if (model.AnySet() || flags.IsSet("seq_len") || flags.IsSet("documents")) {
      return absl::InvalidArgumentError(
          "--job takes the model, L and documents from the job: drop the model flags, --seq_len and "
          "--documents, or drop --job");
    }
    request.set_job_id(options.job);
  } else {
    if (!flags.IsSet("seq_len")) {
      return absl::InvalidArgumentError("give --job=ID, or a model (model flags) and --seq_len=L");
    }
    if (options.seq_len < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--seq_len=", options.seq_len, ": expected at least 1 token"));
    }
    if (absl::Status s =
            planner::CheckDocuments(options.documents, options.seq_len, "--documents", "--seq_len");
        !s.ok()) {
      return s;
    }
    v1::WorkloadSpec& spec = *request.mutable_spec();
    if (absl::Status s = model.Apply(spec.mutable_model()->mutable_config()); !s.ok()) return s;
    spec.set_sequence_length(options.seq_len);
    spec.set_documents(options.documents);
  }
  const std::string objective = absl::AsciiStrToLower(options.objective);
  if (objective == "time") {
    request.set_objective(v1::OBJECTIVE_TIME);
  } else if (objective == "memory") {
    request.set_objective(v1::OBJECTIVE_MEMORY);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--objective=", options.objective, ": expected time or memory"));
  }
  if (flags.IsSet("dtype") || !flags.IsSet("job")) {
    const std::string dtype = absl::AsciiStrToLower(options.dtype);
    if (dtype == "float32") {
      request.set_dtype(v1::DTYPE_FLOAT32);
    } else if (dtype == "float64") {
      request.set_dtype(v1::DTYPE_FLOAT64);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--dtype=", options.dtype, ": expected float32 or float64"));
    }
  }
  if (!(options.safety_margin >= 0 && options.safety_margin < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--safety_margin=", options.safety_margin, ": expected 0 <= margin < 1"));
  }
  if (flags.IsSet("safety_margin")) request.set_safety_margin(options.safety_margin);
  if (flags.IsSet("bf16_products")) request.set_bf16_products(options.bf16_products);
  if (flags.IsSet("frontier")) request.set_include_frontier(options.frontier);
  if (options.all) request.set_page_size(50);

  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();
  v1::GetMemoryPlanResponse plans;
  PageTokens pages("GetMemoryPlan");
  for (;;) {
    v1::GetMemoryPlanResponse page;
    absl::Status status =
        (*client)->Call("GetMemoryPlan", Idempotency::kIdempotent, [&](grpc::ClientContext* context) {
          return (*client)->stub().GetMemoryPlan(context, request, &page);
        });
    if (!status.ok()) return status;
    for (v1::MemoryPlan& plan : *page.mutable_plans()) *plans.add_plans() = std::move(plan);
    if (page.next_page_token().empty()) break;
    if (absl::Status fresh = pages.Next(page.next_page_token()); !fresh.ok()) return fresh;
    request.set_page_token(page.next_page_token());
  }

  if (!options.all) {
    for (const v1::MemoryPlan& plan : plans.plans()) {
      if (plan.has_refusal()) {
        return absl::ResourceExhaustedError(
            absl::StrCat("worker ", options.worker, ": no plan fits: ", plan.refusal()));
      }
    }
  }
  if (connection.json) {
    out << ProtoToJson(plans, /*pretty=*/true) << "\n";
    return absl::OkStatus();
  }
  if (plans.plans_size() == 0) {
    out << "no live workers to plan for\n";
    return absl::OkStatus();
  }
  bool first = true;
  for (const v1::MemoryPlan& plan : plans.plans()) {
    if (!first) out << "\n";
    out << FormatMemoryPlan(plan);
    first = false;
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
