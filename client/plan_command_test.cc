#include "client/plan_command.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/test_util.h"
#include "client/device_calibrator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/device_profile.h"
#include "planner/device_profile_io.h"
#include "planner/plan_proto.h"
#include "planner/plan_search.h"
#include "planner/transformer_baselines.h"

namespace slimfit::client {
namespace {

using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::ordered_json;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// The hand-written profile in testdata: fixed constants, so nothing here depends on timing.
std::string ProfilePath() { return testing_util::RunfilePath("client/testdata/tiny_cpu.profile"); }

// A calibrator that must not be called (the --profile path).
absl::StatusOr<CalibrationOutcome> NoCalibration(const CalibrationRequest&) {
  ADD_FAILURE() << "the calibrator was called";
  return absl::InternalError("unexpected calibration");
}

absl::StatusOr<std::string> RunPlan(std::vector<std::string> args,
                                    const DeviceCalibrator& calibrate = NoCalibration) {
  std::ostringstream out;
  if (absl::Status s = RunPlanCommand(args, out, calibrate); !s.ok()) return s;
  return out.str();
}

// A tiny Performer: plans are searched in milliseconds.
const std::vector<std::string> kTinyModel = {"--d_model=32", "--layers=1", "--heads=2",
                                             "--d_ff=64",    "--vocab=32", "--seq_len=256"};

std::vector<std::string> TinyArgs(std::vector<std::string> more) {
  std::vector<std::string> args = kTinyModel;
  args.push_back(absl::StrCat("--profile=", ProfilePath()));
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

planner::PlanSearchRequest TinyRequest(int64_t budget) {
  planner::PlanSearchRequest request;
  request.workload.model.d_model = 32;
  request.workload.model.layers = 1;
  request.workload.model.heads = 2;
  request.workload.model.d_ff = 64;
  request.workload.model.vocab = 32;
  request.workload.seq_len = 256;
  request.memory_budget_bytes = budget;
  return request;
}

planner::DeviceProfile TinyProfile() {
  absl::StatusOr<planner::DeviceProfile> profile = planner::ReadDeviceProfile(ProfilePath());
  EXPECT_TRUE(profile.ok()) << profile.status();
  return profile.ok() ? *profile : planner::DeviceProfile();
}

// A budget under which full back-propagation does not fit (the usable 90% is below its peak) but
// sliced plans do.
int64_t TightBudget() {
  absl::StatusOr<planner::PlanSearchResult> roomy =
      planner::SearchPlans(TinyRequest(int64_t{1} << 40), TinyProfile());
  EXPECT_TRUE(roomy.ok()) << roomy.status();
  return roomy.ok() ? roomy->full_backprop.prediction.peak_bytes : 0;
}

std::vector<std::string> Keys(const Json& json) {
  std::vector<std::string> keys;
  for (auto it = json.begin(); it != json.end(); ++it) keys.push_back(it.key());
  return keys;
}

const std::vector<std::string> kPlanKeys = {
    "slice",         "prefix_mode",          "block",           "front_policy",
    "slots",         "resync_every",         "recompute",       "copy_forward_weights",
    "bf16_products", "predicted_peak_bytes", "predicted_time_s"};

TEST(PlanCommandTest, ChosenPlanIsTheSearchResult) {
  const int64_t budget = TightBudget();
  absl::StatusOr<std::string> text = RunPlan(TinyArgs({absl::StrCat("--memory_budget=", budget), "--json"}));
  ASSERT_TRUE(text.ok()) << text.status();
  const Json json = Json::parse(*text);
  absl::StatusOr<planner::PlanSearchResult> want = planner::SearchPlans(TinyRequest(budget), TinyProfile());
  ASSERT_TRUE(want.ok()) << want.status();

  const Json& chosen = json["chosen"];
  EXPECT_EQ(Keys(chosen), kPlanKeys);
  const performer::Plan& plan = want->chosen.plan;
  EXPECT_GT(plan.slice, 0);  // full back-propagation does not fit this budget
  EXPECT_EQ(chosen["slice"], plan.slice);
  EXPECT_EQ(chosen["prefix_mode"], std::string(performer::PrefixModeName(plan.prefix_mode)));
  EXPECT_EQ(chosen["front_policy"], std::string(performer::FrontPolicyName(plan.front_policy)));
  EXPECT_EQ(chosen["recompute"], std::string(performer::LayerRecomputeName(plan.recompute)));
  EXPECT_EQ(chosen["predicted_peak_bytes"], plan.predicted_peak_bytes);
  EXPECT_EQ(chosen["predicted_time_s"], plan.predicted_time_s);
  EXPECT_LE(chosen["predicted_peak_bytes"].get<double>(), 0.9 * static_cast<double>(budget));
  EXPECT_EQ(json["reason"], want->reason);
  EXPECT_EQ(json["candidates_considered"], want->candidates_considered);
  EXPECT_EQ(json["memory_budget_bytes"], budget);
}

// --bf16_products: the same search with bfloat16 products in every plan (the JSON says so).
TEST(PlanCommandTest, Bf16ProductsPlansSaySo) {
  const int64_t budget = TightBudget();
  absl::StatusOr<std::string> text =
      RunPlan(TinyArgs({absl::StrCat("--memory_budget=", budget), "--bf16_products", "--json"}));
  ASSERT_TRUE(text.ok()) << text.status();
  const Json json = Json::parse(*text);
  planner::PlanSearchRequest request = TinyRequest(budget);
  request.bf16_products = true;
  absl::StatusOr<planner::PlanSearchResult> want = planner::SearchPlans(request, TinyProfile());
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(json["chosen"]["bf16_products"], true);
  EXPECT_EQ(json["chosen"]["predicted_peak_bytes"], want->chosen.plan.predicted_peak_bytes);
  EXPECT_EQ(json["reason"], want->reason);
  absl::StatusOr<std::string> wide = RunPlan(TinyArgs({"--dtype=float64", "--bf16_products"}));
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(wide.status()), HasSubstr("--bf16_products: bfloat16 products need dtype float32"));
}

TEST(PlanCommandTest, JsonShape) {
  absl::StatusOr<std::string> text =
      RunPlan(TinyArgs({absl::StrCat("--memory_budget=", TightBudget()), "--json"}));
  ASSERT_TRUE(text.ok()) << text.status();
  const Json json = Json::parse(*text);
  EXPECT_EQ(Keys(json), (std::vector<std::string>{"arch", "model", "workload", "device", "objective",
                                                  "memory_budget_bytes", "safety_margin", "chosen", "reason",
                                                  "frontier", "candidates_considered", "baselines"}));
  EXPECT_EQ(json["arch"], "performer");
  EXPECT_EQ(json["model"]["d_model"], 32);
  EXPECT_EQ(json["model"]["features"], "sqr");
  EXPECT_EQ(json["workload"]["seq_len"], 256);
  EXPECT_EQ(json["workload"]["documents"], 1);
  EXPECT_EQ(json["device"]["source"], "profile");
  EXPECT_EQ(json["device"]["path"], ProfilePath());
  EXPECT_EQ(json["device"]["profile"]["device_name"], "test CPU");
  EXPECT_EQ(json["device"]["profile"]["flops_per_second"], 1e10);

  // The frontier: plans with exactly the plan keys, by increasing peak and decreasing time, the
  // chosen plan among them.
  const Json& frontier = json["frontier"];
  ASSERT_GE(frontier.size(), 2u);
  bool chosen_found = false;
  for (size_t i = 0; i < frontier.size(); ++i) {
    EXPECT_EQ(Keys(frontier[i]), kPlanKeys);
    if (frontier[i] == json["chosen"]) chosen_found = true;
    if (i == 0) continue;
    EXPECT_GE(frontier[i]["predicted_peak_bytes"], frontier[i - 1]["predicted_peak_bytes"]);
    EXPECT_LT(frontier[i]["predicted_time_s"], frontier[i - 1]["predicted_time_s"]);
  }
  EXPECT_TRUE(chosen_found);

  const Json& full = json["baselines"]["full_backprop"];
  EXPECT_EQ(Keys(full), kPlanKeys);
  EXPECT_EQ(full["slice"], 0);
  EXPECT_TRUE(full["front_policy"].is_null());
  EXPECT_EQ(full["recompute"], "none");
  const Json& softmax = json["baselines"]["softmax_transformer"];
  EXPECT_EQ(softmax["batch"], 1);
  EXPECT_EQ(softmax["seq_len"], 256);
  EXPECT_EQ(softmax["bytes_per_element"], 4);
  EXPECT_EQ(softmax["dropout"], false);
  ASSERT_EQ(softmax["rows"].size(), 12u);

  planner::BaselineWorkload workload;
  workload.shape.d_model = 32;
  workload.shape.layers = 1;
  workload.shape.heads = 2;
  workload.shape.d_ff = 64;
  workload.shape.vocab_size = 32;
  workload.shape.bytes_per_element = 4;
  workload.shape.dropout = false;
  workload.state.adam = false;
  workload.batch = planner::BatchSpec::Explicit({256});
  absl::StatusOr<std::vector<planner::BaselineRow>> rows = planner::ComputeBaselines(workload);
  ASSERT_TRUE(rows.ok());
  for (size_t i = 0; i < rows->size(); ++i) {
    EXPECT_EQ(softmax["rows"][i]["total_bytes"], (*rows)[i].total_bytes) << i;
  }
}

TEST(PlanCommandTest, PlanFieldsAreNullWhereTheyDoNotApply) {
  absl::StatusOr<std::string> text =
      RunPlan(TinyArgs({absl::StrCat("--memory_budget=", TightBudget()), "--json"}));
  ASSERT_TRUE(text.ok()) << text.status();
  for (const Json& plan : Json::parse(*text)["frontier"]) {
    EXPECT_EQ(plan["block"].is_null(), plan["prefix_mode"] == "cumsum");
    EXPECT_EQ(plan["slots"].is_null(), plan["front_policy"] != "dp");
    EXPECT_EQ(plan["resync_every"].is_null(), plan["front_policy"] != "resync");
    EXPECT_TRUE(plan["recompute"] == "none" || plan["recompute"] == "layers") << plan;
  }
}

TEST(PlanCommandTest, MemoryObjectiveChoosesTheLeastPeak) {
  absl::StatusOr<std::string> text =
      RunPlan(TinyArgs({absl::StrCat("--memory_budget=", TightBudget()), "--objective=memory", "--json"}));
  ASSERT_TRUE(text.ok()) << text.status();
  const Json json = Json::parse(*text);
  EXPECT_EQ(json["objective"], "memory");
  EXPECT_EQ(json["chosen"], json["frontier"][0]);
}

TEST(PlanCommandTest, TextHasPlanFrontierAndBaselines) {
  absl::StatusOr<std::string> text = RunPlan(TinyArgs({absl::StrCat("--memory_budget=", TightBudget())}));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("Performer: d_model 32, 1 layers, 2 heads, d_ff 64"));
  EXPECT_THAT(*text, HasSubstr("device           cpu (test CPU), 2 threads; profile "));
  EXPECT_THAT(*text, HasSubstr("\nchosen plan\n  slice C          "));
  EXPECT_THAT(*text, HasSubstr("  recompute        "));
  EXPECT_THAT(*text, HasSubstr("  reason           fastest plan under"));
  EXPECT_THAT(*text, HasSubstr("\nPareto frontier: "));
  EXPECT_THAT(*text, HasSubstr("\n*"));  // the chosen row is marked
  EXPECT_THAT(*text, HasSubstr("full back-propagation of this Performer: peak "));
  EXPECT_THAT(*text, HasSubstr("does not fit the budget"));
  EXPECT_THAT(*text, HasSubstr("softmax transformer of the same width, depth and heads on one "
                               "sequence of 256 tokens"));
  EXPECT_THAT(*text, HasSubstr("    padding-free  full"));
}

TEST(PlanCommandTest, SvgDrawsEveryCandidateTheFrontierAndTheBudget) {
  const std::string svg_path = TempPath("frontier.svg");
  absl::StatusOr<std::string> json =
      RunPlan(TinyArgs({absl::StrCat("--memory_budget=", TightBudget()), "--json", "--svg=" + svg_path}));
  ASSERT_TRUE(json.ok()) << json.status();
  const Json parsed = Json::parse(*json);  // the JSON on stdout is untouched by --svg
  absl::StatusOr<std::string> svg = base::ReadFileToString(svg_path);
  ASSERT_TRUE(svg.ok()) << svg.status();
  const planner::PlanSearchResult result = *planner::SearchPlans(TinyRequest(TightBudget()), TinyProfile());
  // One circle per candidate, plus the two markers (full back-propagation, the chosen plan).
  size_t circles = 0;
  for (size_t at = svg->find("<circle"); at != std::string::npos; at = svg->find("<circle", at + 1))
    ++circles;
  EXPECT_EQ(circles, result.candidate_points.size() + 2);
  EXPECT_GT(result.candidate_points.size(), result.frontier.size());
  EXPECT_THAT(*svg, HasSubstr(absl::StrCat(">", result.candidate_points.size(), " candidates<")));
  EXPECT_THAT(*svg, HasSubstr(">Pareto frontier<"));
  EXPECT_THAT(*svg, HasSubstr(">full back-propagation<"));
  EXPECT_THAT(*svg, HasSubstr(absl::StrCat(">chosen: ", planner::PlanSummary(result.chosen.plan), "<")));
  EXPECT_THAT(*svg, HasSubstr(">budget "));
  EXPECT_THAT(*svg, HasSubstr(">usable<"));

  const absl::Status unwritable =
      RunPlan(TinyArgs({absl::StrCat("--memory_budget=", TightBudget()), "--svg=/nonexistent/dir/f.svg"}))
          .status();
  EXPECT_FALSE(unwritable.ok());
  EXPECT_THAT(Message(unwritable), StartsWith("--svg: "));
}

TEST(PlanCommandTest, NothingFitsIsResourceExhaustedWithThePlannersReason) {
  absl::StatusOr<std::string> text = RunPlan(TinyArgs({"--memory_budget=1KiB"}));
  ASSERT_EQ(text.status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<planner::PlanSearchResult> want = planner::SearchPlans(TinyRequest(1024), TinyProfile());
  ASSERT_EQ(want.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Message(text.status()), absl::StrCat("no plan fits: ", want.status().message()));
}

TEST(PlanCommandTest, BudgetDefaultsToTheProfilesMemory) {
  absl::StatusOr<std::string> text = RunPlan(TinyArgs({"--json"}));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(Json::parse(*text)["memory_budget_bytes"], int64_t{1} << 30);  // from the profile
}

TEST(PlanCommandTest, BudgetRequiredWhenTheProfileDoesNotKnowTheMemory) {
  const std::string path = TempPath("no_memory.profile");
  std::ofstream(path) << "device: \"cpu\"\nthreads: 1\n";
  std::vector<std::string> args = kTinyModel;
  args.push_back(absl::StrCat("--profile=", path));
  absl::StatusOr<std::string> text = RunPlan(args);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--memory_budget is required"));
}

TEST(PlanCommandTest, DeviceCalibratesWithTheRequestedSettings) {
  CalibrationRequest seen;
  int calls = 0;
  DeviceCalibrator calibrator = [&](const CalibrationRequest& request) -> absl::StatusOr<CalibrationOutcome> {
    seen = request;
    ++calls;
    CalibrationOutcome outcome;
    outcome.profile = TinyProfile();
    outcome.profile.device_name = "calibrated CPU";
    outcome.profile.threads = request.threads;
    return outcome;
  };
  std::vector<std::string> args = kTinyModel;
  for (const char* arg :
       {"--device=cpu", "--threads=3", "--dtype=float64", "--memory_budget=1GiB", "--json"}) {
    args.push_back(arg);
  }
  absl::StatusOr<std::string> text = RunPlan(args, calibrator);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen.device, "cpu");
  EXPECT_EQ(seen.threads, 3);
  EXPECT_EQ(seen.dtype, performer::DType::kFloat64);
  const Json json = Json::parse(*text);
  EXPECT_EQ(json["device"]["source"], "calibrated");
  EXPECT_FALSE(json["device"].contains("path"));
  EXPECT_EQ(json["device"]["profile"]["device_name"], "calibrated CPU");
  EXPECT_EQ(json["workload"]["dtype"], "float64");
  EXPECT_EQ(json["baselines"]["softmax_transformer"]["bytes_per_element"], 8);
}

TEST(PlanCommandTest, CalibrationErrorsPropagate) {
  DeviceCalibrator failing = [](const CalibrationRequest&) -> absl::StatusOr<CalibrationOutcome> {
    return absl::InvalidArgumentError("unknown device 'tpu'");
  };
  std::vector<std::string> args = kTinyModel;
  args.push_back("--device=tpu");
  absl::StatusOr<std::string> text = RunPlan(args, failing);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(text.status()), "unknown device 'tpu'");
}

TEST(PlanCommandTest, DeviceSourceErrors) {
  std::vector<std::string> neither = kTinyModel;
  absl::StatusOr<std::string> text = RunPlan(neither);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("give --profile=FILE"));

  text = RunPlan(TinyArgs({"--device=cpu"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("not both"));

  text = RunPlan(TinyArgs({"--threads=2"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--threads applies to --device"));

  std::vector<std::string> missing = kTinyModel;
  missing.push_back("--profile=/no/such/profile");
  text = RunPlan(missing);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(text.status()), StartsWith("/no/such/profile: "));

  const std::string bad = TempPath("bad.profile");
  std::ofstream(bad) << "threads: 2\nflops_per_second: fast\n";
  std::vector<std::string> malformed = kTinyModel;
  malformed.push_back(absl::StrCat("--profile=", bad));
  text = RunPlan(malformed);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("line 2, column 19"));
}

TEST(PlanCommandTest, FlagValueErrorsNameTheFlag) {
  struct Case {
    std::string arg;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"--features=softmax", "--features: "},
      {"--ln=middle", "--ln: "},
      {"--dtype=int8", "--dtype: "},
      {"--objective=fun", "--objective: "},
      {"--optimizer=sgd", "--optimizer=sgd"},
      {"--documents=0", "--documents: must be between 1 and --seq_len (256), got 0"},
      {"--documents=257", "--documents: must be between 1 and --seq_len (256), got 257"},
      {"--safety_margin=1", "--safety_margin: must be in [0, 1), got 1"},
      {"--memory_budget=0", "--memory_budget: must be > 0, got 0"},
      {"--memory_budget=12XB", "--memory_budget=12XB: unknown unit"},
      {"--heads=3", "heads"},
      {"--batch=2", "unknown flag --batch for 'slimfit plan'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> text = RunPlan(TinyArgs({c.arg}));
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << c.arg;
    EXPECT_THAT(Message(text.status()), HasSubstr(c.expected)) << c.arg;
  }
}

TEST(PlanCommandTest, ArchDispatch) {
  absl::StatusOr<std::string> text = RunPlan({"--arch", "transformer", "--d_model=64", "--layers=2",
                                              "--heads=4", "--batch=2", "--seq_len=128", "--json"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(Json::parse(*text)["arch"], "transformer");

  text = RunPlan({"--arch=rnn", "--seq_len=4"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--arch=rnn: expected performer"));
}

TEST(PlanCommandTest, Help) {
  absl::StatusOr<std::string> text = RunPlan({"--help"});
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("usage: slimfit plan --seq_len=L"));
  EXPECT_THAT(*text, HasSubstr("--memory_budget=SIZE"));
  text = RunPlan({"--arch=transformer", "--help"});
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("--length_distribution=TEXT"));
}

}  // namespace
}  // namespace slimfit::client
