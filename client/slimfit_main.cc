// slimfit: the command-line client. `slimfit help` lists the commands; `slimfit <command> --help`
// lists a command's flags. Offline planning commands: schedule, plan, calibrate; service commands,
// which talk to a slimfit-coordinator: submit, status, watch, cancel, jobs, workers, plan
// --worker/--all, export (README.md, "CLI reference"). Exit status 0 on success, 1 when a request
// cannot be carried out, 2 for usage and input errors (client/command.h); every error is one line
// "slimfit: <message>" on stderr.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "client/calibrate_command.h"
#include "client/cancel_command.h"
#include "client/certs_command.h"
#include "client/command.h"
#include "client/coordinator_plan_command.h"
#include "client/export_command.h"
#include "client/generate_command.h"
#include "client/jobs_command.h"
#include "client/plan_command.h"
#include "client/schedule_command.h"
#include "client/score_command.h"
#include "client/status_command.h"
#include "client/submit_command.h"
#include "client/watch_command.h"
#include "client/workers_command.h"

int main(int argc, char** argv) {
  using namespace slimfit::client;
  const std::vector<std::string> args(argv + 1, argv + argc);
  // `watch` redraws its progress line in place only on a terminal.
  const bool terminal = isatty(STDOUT_FILENO) == 1;
  const std::vector<Command> commands = {
      {"schedule", "optimal checkpoint schedule (Gruslys et al.) for T slices in M slots (cost, peaks)",
       RunScheduleCommand},
      {"plan", "the plan a device (or a registered worker) should run within its memory, with baselines",
       [](absl::Span<const std::string> command_args, std::ostream& out) {
         if (IsCoordinatorPlan(command_args)) return RunCoordinatorPlanCommand(command_args, out);
         return RunPlanCommand(command_args, out, CalibrateDevice);
       }},
      {"calibrate", "measure a device and print or write its profile",
       [](absl::Span<const std::string> command_args, std::ostream& out) {
         return RunCalibrateCommand(command_args, out, CalibrateDevice);
       }},
      {"submit", "upload data and submit a training job to the coordinator",
       [terminal](absl::Span<const std::string> command_args, std::ostream& out) {
         return RunSubmitCommand(command_args, out, terminal);
       },
       /*streams_output=*/true},
      {"status", "one job's state, progress, loss and ETA", RunStatusCommand},
      {"watch", "follow a job's progress until it ends (exit 0 if it succeeded)",
       [terminal](absl::Span<const std::string> command_args, std::ostream& out) {
         return RunWatchCommand(command_args, out, terminal);
       },
       /*streams_output=*/true},
      {"cancel", "cancel a queued or running job", RunCancelCommand},
      {"jobs", "the coordinator's jobs, newest first", RunJobsCommand},
      {"workers", "the coordinator's workers with their budgets, plans and speeds", RunWorkersCommand},
      {"export", "download a job's checkpoint as a safetensors file", RunExportCommand},
      {"certs", "make the CA and certificates of a TLS deployment", RunCertsCommand},
      {"generate", "generate text from a trained model (the Performer's recurrent form)", RunGenerateCommand},
      {"score", "bits per byte of a model on a file", RunScoreCommand},
  };
  return RunCli(args, commands, std::cout, std::cerr);
}
