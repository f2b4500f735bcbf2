// slimfit: the command-line client. `slimfit help` lists the commands; `slimfit <command> --help`
// lists a command's flags. Offline planning commands: schedule, plan, calibrate (README.md, "CLI
// reference"). Exit status 0 on success, 1 when a request cannot be carried out, 2 for usage and
// input errors (client/command.h); every error is one line "slimfit: <message>" on stderr.
#include <iostream>
#include <string>
#include <vector>

#include "client/calibrate_command.h"
#include "client/command.h"
#include "client/plan_command.h"
#include "client/schedule_command.h"

int main(int argc, char** argv) {
  using namespace slimfit::client;
  const std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<Command> commands = {
      {"schedule", "optimal seed-002 checkpoint schedule for T slices in M slots (cost, peaks)",
       RunScheduleCommand},
      {"plan", "the plan a device with a given memory should run, with baselines",
       [](absl::Span<const std::string> command_args, std::ostream& out) {
         return RunPlanCommand(command_args, out, CalibrateDevice);
       }},
      {"calibrate", "measure a device and print or write its profile",
       [](absl::Span<const std::string> command_args, std::ostream& out) {
         return RunCalibrateCommand(command_args, out, CalibrateDevice);
       }},
  };
  return RunCli(args, commands, std::cout, std::cerr);
}
