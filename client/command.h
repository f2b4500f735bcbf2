// What every `slimfit` command shares: its signature, the exit status a result maps to, and the
// one-line error format.
//
// A command receives the arguments after its name (`slimfit schedule --steps=8` → {"--steps=8"}),
// writes its result to `out` (a table for people, or JSON with --json) and returns OK, or returns
// an error (RunCli then discards whatever the command wrote, unless the command streams its
// output: see Command::streams_output). RunCli prints an error as one line "slimfit: <message>" on
// stderr and exits with base::ExitCodeForStatus. With --help a command writes its help to `out` and
// returns OK.
//
// Exit statuses and the error line follow base/exit_status.h (documented in README.md, "CLI
// reference").
//
// Thread safety: plain functions and values.
#ifndef SLIMFIT_CLIENT_COMMAND_H_
#define SLIMFIT_CLIENT_COMMAND_H_

#include <functional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/exit_status.h"

namespace slimfit::client {

using CommandFunction = std::function<absl::Status(absl::Span<const std::string> args, std::ostream& out)>;

struct Command {
  std::string name;     // the word after `slimfit`
  std::string summary;  // one line for `slimfit help`
  CommandFunction run;
  // false: RunCli buffers the output and writes it only on success (a refused plan leaves no half
  // table). true: `run` writes straight to RunCli's `out` as it goes (`slimfit watch` prints each
  // event when it happens, and flushes); on an error, what was written stays and the one-line
  // error follows on stderr.
  bool streams_output = false;
};

// Runs `slimfit` with `args` = argv[1..] over `commands`: dispatches to the named command, or
// handles `help` / `help <command>` / `--help` / `-h` itself (the list of commands, or the
// command's own --help). Writes results to `out` and errors (one line, base::FormatErrorLine) to `err`;
// returns the exit status. No command word, or an unknown one, is a usage error.
int RunCli(absl::Span<const std::string> args, absl::Span<const Command> commands, std::ostream& out,
           std::ostream& err);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_COMMAND_H_
