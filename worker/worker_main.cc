// slimfit-worker: the worker daemon (worker/worker_daemon.h; `slimfit-worker --help`).
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "worker/worker_daemon.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return slimfit::worker::WorkerMain(args, std::getenv("SLIMFIT_WORKER_TOKEN"), std::cout, std::cerr);
}
