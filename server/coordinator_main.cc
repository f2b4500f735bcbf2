// slimfit-coordinator: the coordinator daemon (server/coordinator_daemon.h; `slimfit-coordinator --help`).
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "server/coordinator_daemon.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  slimfit::server::CoordinatorEnvironment env;
  env.token = std::getenv("SLIMFIT_TOKEN");
  env.worker_token = std::getenv("SLIMFIT_WORKER_TOKEN");
  return slimfit::server::CoordinatorMain(args, env, std::cout, std::cerr);
}
