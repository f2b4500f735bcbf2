#include "planner/bptt_schedule.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner/bptt_schedule_references.h"

namespace slimfit::planner {
namespace {

using Type = ScheduleAction::Type;
constexpr int64_t kInf = kReferenceInf;

int64_t Ceil(double x) { return static_cast<int64_t>(std::ceil(x)); }

int64_t Cost(const Variant& v, int64_t t, int64_t m) {
  absl::StatusOr<int64_t> cost = OptimalCost(v.kind, t, m, v.alpha, v.beta);
  EXPECT_TRUE(cost.ok()) << cost.status();
  return cost.ok() ? *cost : -1;
}

// ---- Optimality ---------------------------------------------------------------------------------

TEST(BpttScheduleTest, ProgramsMatchExhaustiveSearchOnSmallCases) {
  for (const Variant& v : AllVariants()) {
    absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(v.kind, 7, 5, v.alpha, v.beta);
    ASSERT_TRUE(policy.ok()) << policy.status();
    for (int t = 1; t <= 7; ++t) {
      for (int m = 1; m <= 5; ++m) {
        SCOPED_TRACE(absl::StrCat(VariantName(v), " t=", t, " m=", m));
        EXPECT_EQ(*policy->Cost(t, m), ExhaustiveCost(v, t, m));
      }
    }
  }
}

TEST(BpttScheduleTest, FastSolverMatchesPlainProgram) {
  constexpr int kT = 160, kM = 24;
  for (const Variant& v : AllVariants()) {
    const auto reference = ReferenceTables(v, kT, kM);
    absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(v.kind, kT, kM, v.alpha, v.beta);
    ASSERT_TRUE(policy.ok()) << policy.status();
    for (int m = 1; m <= kM; ++m) {
      for (int t = 1; t <= kT; ++t) {
        ASSERT_EQ(*policy->Cost(t, m), reference[1][m][t]) << VariantName(v) << " t=" << t << " m=" << m;
      }
    }
  }
}

TEST(BpttScheduleTest, EqualsSeedProgramsAndImprovesMsmOnlyWhereRefined) {
  constexpr int kT = 90, kM = 16;
  for (const Variant& v : AllVariants()) {
    const auto seed = SeedTables(v, kT, kM);
    absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(v.kind, kT, kM, v.alpha, v.beta);
    ASSERT_TRUE(policy.ok()) << policy.status();
    const bool refined = v.kind == ScheduleKind::kMsm && Ceil(v.beta) > Ceil(v.alpha) - 1;
    bool improved_somewhere = false;
    for (int m = 1; m <= kM; ++m) {
      for (int t = 1; t <= kT; ++t) {
        SCOPED_TRACE(absl::StrCat(VariantName(v), " t=", t, " m=", m));
        const int64_t ours = *policy->Cost(t, m);
        if (refined) {
          EXPECT_LE(ours, seed[m][t]);
          improved_somewhere |= ours < seed[m][t];
        } else {
          EXPECT_EQ(ours, seed[m][t]);
        }
      }
    }
    if (refined) {
      EXPECT_TRUE(improved_somewhere) << VariantName(v);
    }
  }
}

// ---- The seed's closed forms and bounds ---------------------------------------------------------

TEST(BpttScheduleTest, ClosedForms) {
  for (const Variant& v : AllVariants()) {
    SCOPED_TRACE(VariantName(v));
    // One slot: C(t, 1) = t(t+1)/2 (seed §3, §3.2, §3.3). The seed's MSM boundary assumes α ≥ 2;
    // with α' = 1 a graph replaces f_0 in the one slot and saves slice 0's forwards.
    absl::StatusOr<BpttPolicy> one = BpttPolicy::Create(v.kind, 1000, 1, v.alpha, v.beta);
    ASSERT_TRUE(one.ok()) << one.status();
    for (int64_t t : {1, 2, 3, 7, 50, 333, 1000}) {
      const bool small_graphs = v.kind == ScheduleKind::kMsm && Ceil(v.alpha) < 2;
      EXPECT_EQ(*one->Cost(t, 1), small_graphs ? 1 + t * (t - 1) / 2 : t * (t + 1) / 2) << "t=" << t;
    }
    // Plentiful memory: HSM 2t − 1 for m ≥ t; ISM t for m ≥ t; MSM t for m ≥ αt.
    constexpr int64_t kT = 333;
    const int64_t per_step = v.kind == ScheduleKind::kMsm ? Ceil(v.alpha) : 1;
    absl::StatusOr<BpttPolicy> plenty =
        BpttPolicy::Create(v.kind, kT, std::max(2 * kT + 5, per_step * kT), v.alpha, v.beta);
    ASSERT_TRUE(plenty.ok()) << plenty.status();
    for (int64_t t : {1, 2, 3, 7, 50, 333}) {
      if (v.kind == ScheduleKind::kMsm) {
        EXPECT_EQ(*plenty->Cost(t, per_step * t), t) << "t=" << t;
        continue;
      }
      for (int64_t m : {t, t + 1, 2 * t + 5}) {
        EXPECT_EQ(*plenty->Cost(t, m), v.kind == ScheduleKind::kHsm ? 2 * t - 1 : t)
            << "t=" << t << " m=" << m;
      }
    }
  }
  // Seed §3.1 Fig. 3: t = m = 4 costs 2t − 1 = 7.
  EXPECT_EQ(Cost({ScheduleKind::kHsm, 0, 0}, 4, 4), 7);
}

TEST(BpttScheduleTest, SeedUpperBounds) {
  constexpr int kT = 2500, kM = 40;
  absl::StatusOr<BpttPolicy> hsm = BpttPolicy::Create(ScheduleKind::kHsm, kT, kM, 0, 0);
  absl::StatusOr<BpttPolicy> ism = BpttPolicy::Create(ScheduleKind::kIsm, kT, kM, 0, 0);
  absl::StatusOr<BpttPolicy> msm = BpttPolicy::Create(ScheduleKind::kMsm, kT, kM, 3, 2);
  ASSERT_TRUE(hsm.ok() && ism.ok() && msm.ok());
  for (int m = 1; m <= kM; ++m) {
    for (int t = 1; t <= kT; ++t) {
      const int64_t c = *hsm->Cost(t, m);
      // Appendix B.1, Proposition 1: C(t, m) ≤ m·t^(1+1/m) (HSM; ISM and MSM inherit it, B.3).
      const long double bound = m * std::pow(static_cast<long double>(t), 1.0L + 1.0L / m);
      ASSERT_LE(c, bound + 1e-9L) << "t=" << t << " m=" << m;
      ASSERT_LE(*ism->Cost(t, m), bound + 1e-9L) << "t=" << t << " m=" << m;
      ASSERT_LE(*msm->Cost(t, m), bound + 1e-9L) << "t=" << t << " m=" << m;
      // §3.5: numerically C(t, m) < 4·t^(1+1/m) for t < 10^5, m < 10^3.
      ASSERT_LT(c, 4 * std::pow(static_cast<long double>(t), 1.0L + 1.0L / m)) << "t=" << t << " m=" << m;
      // ISM can mimic any HSM schedule (a kept graph holds the front it replaces) and MSM
      // contains HSM, so neither is ever worse with the same number of slots.
      ASSERT_LE(*ism->Cost(t, m), c) << "t=" << t << " m=" << m;
      ASSERT_LE(*msm->Cost(t, m), c) << "t=" << t << " m=" << m;
    }
  }
  // Appendix B.2: C(t, m) ≤ (a + 1)·t for t ≤ m^a / a!.
  for (int m = 2; m <= kM; ++m) {
    for (int a = 1; a <= 6; ++a) {
      long double limit = 1;
      for (int i = 1; i <= a; ++i) limit *= static_cast<long double>(m) / i;
      const int tmax = static_cast<int>(std::min<long double>(limit, kT));
      for (int t = 1; t <= tmax; ++t) {
        ASSERT_LE(*hsm->Cost(t, m), (a + 1) * int64_t{t}) << "t=" << t << " m=" << m << " a=" << a;
      }
    }
  }
}

TEST(BpttScheduleTest, CostIsMonotoneInStepsAndSlots) {
  constexpr int kT = 300, kM = 30;
  for (const Variant& v : AllVariants()) {
    absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(v.kind, kT, kM, v.alpha, v.beta);
    ASSERT_TRUE(policy.ok());
    for (int m = 1; m <= kM; ++m) {
      for (int t = 1; t <= kT; ++t) {
        const int64_t c = *policy->Cost(t, m);
        ASSERT_GE(c, t) << VariantName(v);
        if (t > 1) {
          ASSERT_GT(c, *policy->Cost(t - 1, m)) << VariantName(v) << " t=" << t << " m=" << m;
        }
        if (m > 1) {
          ASSERT_LE(c, *policy->Cost(t, m - 1)) << VariantName(v) << " t=" << t << " m=" << m;
        }
      }
    }
  }
}

TEST(BpttScheduleTest, MsmWithGraphsTooLargeIsHsm) {
  for (int m = 1; m <= 12; ++m) {
    for (int t = 1; t <= 120; t += 7) {
      const double too_big = m + 1.5;
      EXPECT_EQ(Cost({ScheduleKind::kMsm, too_big, too_big}, t, m), Cost({ScheduleKind::kHsm, 0, 0}, t, m))
          << "t=" << t << " m=" << m;
    }
  }
}

// ---- Schedules ----------------------------------------------------------------------------------

TEST(BpttScheduleTest, SmallHsmScheduleIsExact) {
  // C(3, 2) = 5: keep f_0, go one slice, solve slices 1..2 with one slot (f_1), then slice 0.
  absl::StatusOr<Schedule> schedule = MakeSchedule(ScheduleKind::kHsm, 3, 2, 0, 0);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  const std::vector<ScheduleAction> expected = {
      {Type::kKeepFront, 0}, {Type::kForward, 0},         {Type::kKeepFront, 1},
      {Type::kForward, 1},   {Type::kForwardBackward, 2}, {Type::kRestore, 1},
      {Type::kFreeFront, 1}, {Type::kForwardBackward, 1}, {Type::kRestore, 0},
      {Type::kFreeFront, 0}, {Type::kForwardBackward, 0},
  };
  EXPECT_EQ(schedule->actions, expected);
  EXPECT_EQ(schedule->forward_count, 5);
  absl::StatusOr<ScheduleStats> stats = SimulateSchedule(*schedule, 3, 2);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->forward_count, 5);
  EXPECT_EQ(stats->peak_units, 2);
}

TEST(BpttScheduleTest, PlentifulMemorySchedulesAreStandardBptt) {
  // ISM with m ≥ t keeps every graph: t forwards, then t backwards.
  absl::StatusOr<Schedule> ism = MakeSchedule(ScheduleKind::kIsm, 4, 4, 0, 0);
  ASSERT_TRUE(ism.ok()) << ism.status();
  const std::vector<ScheduleAction> expected = {
      {Type::kForwardKeepGraph, 0}, {Type::kForwardKeepGraph, 1}, {Type::kForwardKeepGraph, 2},
      {Type::kForwardBackward, 3},  {Type::kBackward, 2},         {Type::kBackward, 1},
      {Type::kBackward, 0},
  };
  EXPECT_EQ(ism->actions, expected);
  // MSM with α = β + 1 and enough memory chains graphs that share their input fronts.
  absl::StatusOr<Schedule> msm = MakeSchedule(ScheduleKind::kMsm, 4, 100, 3, 2);
  ASSERT_TRUE(msm.ok()) << msm.status();
  EXPECT_EQ(msm->forward_count, 4);
  absl::StatusOr<ScheduleStats> stats = SimulateSchedule(*msm, 4, 100);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->kept_graph_count, 3);
}

TEST(BpttScheduleTest, EveryGeneratedScheduleSimulatesToItsCost) {
  std::vector<int> steps;
  for (int t = 1; t <= 40; ++t) steps.push_back(t);
  for (int t : {63, 64, 65, 100, 257, 1000}) steps.push_back(t);
  const std::vector<int> slots = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 20, 33, 64};
  for (const Variant& v : AllVariants()) {
    absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(v.kind, 1000, 64, v.alpha, v.beta);
    ASSERT_TRUE(policy.ok()) << policy.status();
    for (int t : steps) {
      for (int m : slots) {
        SCOPED_TRACE(absl::StrCat(VariantName(v), " t=", t, " m=", m));
        absl::StatusOr<Schedule> schedule = policy->MakeSchedule(t, m);
        ASSERT_TRUE(schedule.ok()) << schedule.status();
        ASSERT_EQ(schedule->forward_count, *policy->Cost(t, m));
        absl::StatusOr<ScheduleStats> stats = SimulateSchedule(*schedule, t, m);
        ASSERT_TRUE(stats.ok()) << stats.status();
        EXPECT_EQ(stats->forward_count, schedule->forward_count);
        EXPECT_EQ(stats->backward_count, t);
        EXPECT_LE(stats->peak_units, m);
        if (v.kind == ScheduleKind::kHsm) {
          EXPECT_EQ(stats->kept_graph_count, 0);
        }
        if (v.kind == ScheduleKind::kIsm) {
          EXPECT_EQ(stats->kept_front_count, 0);
        }
      }
    }
  }
}

TEST(BpttScheduleTest, SchedulesFitTheirBudgetTightly) {
  // With one slot fewer than it was made for, an HSM schedule that uses all its slots fails with
  // RESOURCE_EXHAUSTED.
  absl::StatusOr<Schedule> schedule = MakeSchedule(ScheduleKind::kHsm, 100, 6, 0, 0);
  ASSERT_TRUE(schedule.ok());
  absl::StatusOr<ScheduleStats> stats = SimulateSchedule(*schedule, 100, 6);
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->peak_units, 6);
  EXPECT_EQ(SimulateSchedule(*schedule, 100, 5).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(BpttScheduleTest, LargeSchedulesAndTiming) {
  for (const Variant& v : {Variant{ScheduleKind::kHsm, 0, 0}, Variant{ScheduleKind::kIsm, 0, 0},
                           Variant{ScheduleKind::kMsm, 3, 2}, Variant{ScheduleKind::kMsm, 3, 3}}) {
    for (int m : {16, 128}) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(v.kind, 16384, m, v.alpha, v.beta);
      ASSERT_TRUE(policy.ok()) << policy.status();
      const auto solved = std::chrono::steady_clock::now();
      absl::StatusOr<Schedule> schedule = policy->MakeSchedule(16384, m);
      ASSERT_TRUE(schedule.ok()) << schedule.status();
      const auto generated = std::chrono::steady_clock::now();
      absl::StatusOr<ScheduleStats> stats = SimulateSchedule(*schedule, 16384, m);
      ASSERT_TRUE(stats.ok()) << stats.status();
      EXPECT_EQ(stats->forward_count, *policy->Cost(16384, m));
      EXPECT_LE(stats->peak_units, m);
      const double solve_s = std::chrono::duration<double>(solved - start).count();
      const double generate_s = std::chrono::duration<double>(generated - solved).count();
      std::printf(
          "[ timing ] %s t=16384 m=%d: C=%lld (%.2f per step), solve %.3f s, schedule "
          "%.3f s, %zu actions\n",
          VariantName(v).c_str(), m, static_cast<long long>(stats->forward_count),
          stats->forward_count / 16384.0, solve_s, generate_s, schedule->actions.size());
      EXPECT_LT(solve_s, 30.0);  // generous: shared 2-core machines; typically < 0.5 s
    }
  }
}

// ---- BpttPolicy ---------------------------------------------------------------------------------

TEST(BpttScheduleTest, PolicyAnswersEverySmallerQuery) {
  absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(ScheduleKind::kMsm, 200, 40, 4, 3);
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(policy->kind(), ScheduleKind::kMsm);
  EXPECT_EQ(policy->max_steps(), 200);
  EXPECT_EQ(policy->max_slots(), 40);
  EXPECT_EQ(policy->alpha(), 4);
  EXPECT_EQ(policy->beta(), 3);
  for (int t : {1, 17, 99, 200}) {
    for (int m : {1, 5, 23, 40}) {
      EXPECT_EQ(*policy->Cost(t, m), Cost({ScheduleKind::kMsm, 4, 3}, t, m)) << "t=" << t << " m=" << m;
    }
  }
}

TEST(BpttScheduleTest, SlotsForCost) {
  absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(ScheduleKind::kHsm, 1000, 64, 0, 0);
  ASSERT_TRUE(policy.ok());
  for (int64_t cap : {1999, 2500, 3000, 5000, 20000, 500500}) {
    absl::StatusOr<int64_t> slots = policy->SlotsForCost(1000, cap);
    if (*policy->Cost(1000, 64) > cap) {
      EXPECT_EQ(slots.status().code(), absl::StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(slots.ok()) << slots.status();
    EXPECT_LE(*policy->Cost(1000, *slots), cap);
    if (*slots > 1) {
      EXPECT_GT(*policy->Cost(1000, *slots - 1), cap);
    }
  }
  EXPECT_EQ(*policy->SlotsForCost(1000, 500500), 1);
  EXPECT_EQ(policy->SlotsForCost(1000, 1000).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(policy->SlotsForCost(1001, 5000).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(policy->SlotsForCost(0, 5000).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BpttScheduleTest, ConcurrentQueriesAgree) {
  absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(ScheduleKind::kMsm, 2000, 64, 3, 3);
  ASSERT_TRUE(policy.ok());
  const BpttPolicy copy = *policy;  // shares the tables
  std::vector<int64_t> results(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      int64_t sum = 0;
      for (int t = 1 + k; t <= 2000; t += 37) {
        absl::StatusOr<Schedule> schedule = copy.MakeSchedule(t, 1 + t % 64);
        if (schedule.ok()) sum += schedule->forward_count;
      }
      results[k] = sum;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int k = 0; k < 4; ++k) {
    int64_t sum = 0;
    for (int t = 1 + k; t <= 2000; t += 37) sum += *policy->Cost(t, 1 + t % 64);
    EXPECT_EQ(results[k], sum);
  }
}

// ---- Errors -------------------------------------------------------------------------------------

TEST(BpttScheduleTest, RejectsBadArguments) {
  const auto code = [](const absl::StatusOr<int64_t>& r) { return r.status().code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kHsm, 0, 4, 0, 0)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kHsm, -3, 4, 0, 0)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kHsm, kMaxScheduleSteps + 1, 4, 0, 0)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kIsm, 10, 0, 0, 0)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kMsm, 10, -1, 3, 2)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kHsm, 10, kMaxScheduleSlots + 1, 0, 0)), kInvalid);
  EXPECT_EQ(code(OptimalCost(static_cast<ScheduleKind>(7), 10, 4, 0, 0)), kInvalid);
  // MSM graph sizes: alpha ≥ 1 and finite, 0 < beta ≤ alpha.
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kMsm, 10, 4, 0.5, 0.5)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kMsm, 10, 4, NAN, 1)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kMsm, 10, 4, INFINITY, 1)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kMsm, 10, 4, 3, 0)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kMsm, 10, 4, 3, 3.5)), kInvalid);
  EXPECT_EQ(code(OptimalCost(ScheduleKind::kMsm, 10, 4, 3, NAN)), kInvalid);
  // HSM and ISM ignore the graph sizes.
  EXPECT_TRUE(OptimalCost(ScheduleKind::kHsm, 10, 4, NAN, -1).ok());
  EXPECT_TRUE(OptimalCost(ScheduleKind::kIsm, 10, 4, 0, 0).ok());
  // Messages say what is wrong.
  EXPECT_NE(OptimalCost(ScheduleKind::kHsm, 0, 4, 0, 0).status().message().find("got 0"), std::string::npos);
  EXPECT_NE(OptimalCost(ScheduleKind::kMsm, 10, 4, 3, 4).status().message().find("beta"), std::string::npos);
}

TEST(BpttScheduleTest, RejectsOversizedTablesAndSchedules) {
  // (T+1)·m_eff cells beyond the limit.
  EXPECT_EQ(BpttPolicy::Create(ScheduleKind::kHsm, 65535, 1000, 0, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(BpttPolicy::Create(ScheduleKind::kMsm, 16384, 600, 3, 3).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Large slot counts are free when they exceed what can help (HSM saturates at m = t).
  EXPECT_TRUE(BpttPolicy::Create(ScheduleKind::kHsm, 1000, kMaxScheduleSlots, 0, 0).ok());
  // One slot on 16384 steps: C = t(t+1)/2 ≈ 1.3e8 forwards, too many actions.
  absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(ScheduleKind::kHsm, 16384, 4, 0, 0);
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(*policy->Cost(16384, 1), int64_t{16384} * 16385 / 2);
  EXPECT_EQ(policy->MakeSchedule(16384, 1).status().code(), absl::StatusCode::kResourceExhausted);
  // Queries beyond the table.
  EXPECT_EQ(policy->Cost(16385, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(policy->Cost(100, 5).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(policy->MakeSchedule(100, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::planner
