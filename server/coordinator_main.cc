// slimfit-coordinator: the coordinator daemon (server/coordinator_daemon.h; `slimfit-coordinator --help`).
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "base/process_memory.h"
#include "server/coordinator_daemon.h"

int main(int argc, char** argv) {
  // Tensors of tens of MiB come and go every round: freed ones must leave the process.
  slimfit::base::ReturnLargeBlocksToTheSystem();
  const std::vector<std::string> args(argv + 1, argv + argc);
  slimfit::server::CoordinatorEnvironment env;
  env.token = std::getenv("SLIMFIT_TOKEN");
  env.worker_token = std::getenv("SLIMFIT_WORKER_TOKEN");
  return slimfit::server::CoordinatorMain(args, env, std::cout, std::cerr);
}
