#include "client/command.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace slimfit::client {
namespace {

std::string GeneralHelp(absl::Span<const Command> commands) {
  std::string text =
      "usage: slimfit <command> [flags]\n"
      "\n"
      "Plans exact-gradient fine-tuning of causal Performer models within a memory budget.\n"
      "\n"
      "commands:\n";
  for (const Command& command : commands) {
    absl::StrAppendFormat(&text, "  %-12s %s\n", command.name, command.summary);
  }
  absl::StrAppend(&text,
                  "  help         this list; 'slimfit help <command>' or 'slimfit <command> --help' "
                  "for a command's flags\n"
                  "\n"
                  "Every command takes --json for machine-readable output. Errors are one line on "
                  "stderr;\nexit status 0 = success, 1 = could not be done (e.g. nothing fits the "
                  "budget, the\ncoordinator cannot be reached, a watched job failed), 2 = usage or "
                  "input error (also an\nunknown job or a rejected token).\n");
  return text;
}

const Command* FindCommand(absl::Span<const Command> commands, absl::string_view name) {
  for (const Command& command : commands) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

absl::Status UnknownCommand(absl::string_view name) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown command '", name, "'; run 'slimfit help' for the list of commands"));
}

}  // namespace

int RunCli(absl::Span<const std::string> args, absl::Span<const Command> commands, std::ostream& out,
           std::ostream& err) {
  auto fail = [&](const absl::Status& status) {
    err << base::FormatErrorLine("slimfit", status.message()) << std::flush;
    return base::ExitCodeForStatus(status);
  };
  if (args.empty()) {
    return fail(absl::InvalidArgumentError(
        "no command given; usage: slimfit <command> [flags]; run 'slimfit help' for the list"));
  }
  const std::string& word = args[0];
  if (word == "help" || word == "--help" || word == "-h") {
    if (args.size() == 1) {
      out << GeneralHelp(commands) << std::flush;
      return base::kExitOk;
    }
    if (args.size() > 2) {
      return fail(absl::InvalidArgumentError("usage: slimfit help [<command>]"));
    }
    const Command* command = FindCommand(commands, args[1]);
    if (command == nullptr) return fail(UnknownCommand(args[1]));
    const std::string help_flag = "--help";
    const absl::Status status = command->run(absl::MakeConstSpan(&help_flag, 1), out);
    if (!status.ok()) return fail(status);
    out << std::flush;
    return base::kExitOk;
  }
  const Command* command = FindCommand(commands, word);
  if (command == nullptr) return fail(UnknownCommand(word));
  if (command->streams_output) {
    const absl::Status status = command->run(args.subspan(1), out);
    out << std::flush;
    if (!status.ok()) return fail(status);
    return base::kExitOk;
  }
  // Output is buffered and written only on success: a refused plan must not leave half a table on
  // stdout.
  std::ostringstream buffer;
  const absl::Status status = command->run(args.subspan(1), buffer);
  if (!status.ok()) return fail(status);
  out << buffer.str() << std::flush;
  return base::kExitOk;
}

}  // namespace slimfit::client
