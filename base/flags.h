// Command-line flags for the `slimfit` client's subcommands, and byte sizes such as "512MiB".
//
// Why not absl flags: `slimfit` is one binary with several commands (schedule, plan, calibrate,
// later submit, watch, …) and each accepts a different set of flags. absl flags are process-wide
// globals: every command would accept every other command's flags without a word, `--help` would
// list all of them, and absl::ParseCommandLine reports a bad flag in its own format and exits with
// status 1 itself, where the client promises one line "slimfit: <message>" and exit status 2 for a
// usage error (client/command.h). A FlagSet is a small, local, tested parser instead: each command
// builds one over the fields of its own Options struct, so the flags it accepts, their defaults
// and its --help text come from one place.
//
// Example:
//   struct Options { int64_t steps = 0; std::string kind = "hsm"; bool json = false; };
//   Options options;
//   FlagSet flags("schedule", "slimfit schedule --steps=T [flags]", "Optimal checkpoint schedules.");
//   flags.Int("steps", &options.steps, "slices T", FlagSet::kRequired);
//   flags.String("kind", &options.kind, "program of Gruslys et al.: hsm, ism or msm");
//   flags.Bool("json", &options.json, "print JSON instead of a table");
//   if (absl::Status s = flags.Parse(args); !s.ok()) return s;   // INVALID_ARGUMENT, one line
//   if (flags.help_requested()) { out << flags.Help(); return absl::OkStatus(); }
//
// Syntax accepted by Parse (args exclude the program and command words):
//   --name=value, --name value   any flag that takes a value; a value may start with '-' ("-1"),
//                                but the separate form refuses one that starts with "--"
//   --name, --name=true|false    Bool flags (also 1|0|yes|no); --noname sets false. The separate
//                                form "--name false" is not accepted for Bools: "false" would be
//                                an unexpected argument
//   --list=a,b --list c          StringList flags: the one kind of flag that may be repeated; each
//                                value is a comma-separated list, appended in order (a, b, c)
//   WORD                         a positional argument, for commands that register Positionals
//                                (`slimfit status JOB`): filled in registration order, anywhere
//                                among the flags; after "--" every argument is positional
//   --help, -h                   help_requested() becomes true; nothing else is checked
// Rejected with INVALID_ARGUMENT, the message naming the flag and the command: an unknown flag
// (with a "did you mean" for a near miss: two edits, or one name a prefix of the other), a flag
// other than a StringList given twice, a missing or malformed value, a positional argument beyond
// those registered, a single-dash flag, a missing kRequired flag or positional.
//
// Thread safety: a FlagSet is not thread-safe; it writes through the pointers it was given, which
// must outlive it. Not copyable.
#ifndef SLIMFIT_BASE_FLAGS_H_
#define SLIMFIT_BASE_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace slimfit::base {

// Parses a byte count: a non-negative decimal number with an optional unit, case-insensitive,
// optionally separated by spaces:
//   B or none                 bytes (a whole number: "1048576")
//   KB, MB, GB, TB            powers of 1000 ("1.5GB" = 1 500 000 000)
//   KiB, MiB, GiB, TiB        powers of 1024 ("512MiB" = 536 870 912)
// A fraction is allowed with a unit larger than a byte; the result is rounded down to whole
// bytes ("1.1KiB" = 1126). The arithmetic is exact (no floating point).
// INVALID_ARGUMENT, the message starting "--<flag>=<text>: " (or "'<text>': " when `flag` is
// empty): empty text, a sign, a malformed number, an unknown unit (the message lists the units),
// a fraction of a byte, or a value above 2^63 − 1 bytes.
[[nodiscard]] absl::StatusOr<int64_t> ParseByteSize(absl::string_view flag, absl::string_view text);

class FlagSet {
 public:
  enum Requirement {
    kOptional,  // Help shows the variable's value at registration as the default
    kRequired,  // Parse fails without it
    // Optional, and the variable's value at registration is no default: the command looks at
    // IsSet() and leaves the setting to someone else when the flag is absent (`slimfit submit
    // --rounds` overrides a job spec). Help shows no default.
    kOptionalNoDefault,
  };

  // `command` names the command in messages ("schedule" → "for 'slimfit schedule'"); `synopsis`
  // is the usage line and `description` the paragraph below it in Help().
  FlagSet(std::string command, std::string synopsis, std::string description);

  // How messages name the program: "slimfit <command>" by default; a daemon with its own binary
  // sets its name ("slimfit-worker").
  void SetInvocation(std::string invocation) { invocation_ = std::move(invocation); }
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Registers a flag writing to `*value`; the value there now is the default Help() prints.
  // REQUIRES: `value` outlives this FlagSet; `name` is new to this set, non-empty, made of
  // [a-z0-9_], does not start with "no" for a Bool, and is not "help".
  void String(absl::string_view name, std::string* value, absl::string_view help,
              Requirement requirement = kOptional);
  void Int(absl::string_view name, int64_t* value, absl::string_view help,
           Requirement requirement = kOptional);
  // Finite numbers only ("nan", "inf" are refused).
  void Double(absl::string_view name, double* value, absl::string_view help,
              Requirement requirement = kOptional);
  void Bool(absl::string_view name, bool* value, absl::string_view help);
  // A byte count in ParseByteSize's syntax.
  void ByteSize(absl::string_view name, int64_t* value, absl::string_view help,
                Requirement requirement = kOptional);
  // A repeatable flag whose values are comma-separated lists, appended to `*values` in command-line
  // order (after what `*values` holds now, which Help prints as the default). An empty item
  // ("--data=", "--data=a,,b") is INVALID_ARGUMENT: a value cannot itself contain a comma.
  void StringList(absl::string_view name, std::vector<std::string>* values, absl::string_view help);

  // `--NAME=FILE`: flags read from a TOML file (base/toml_file.h: `key = value` per flag, at the top
  // level) before the command line, which overrides them. A key that is not a flag, or a malformed
  // value, is INVALID_ARGUMENT starting with the file's path. Flags taken from the file count as
  // given (IsSet, kRequired). At most one per set.
  void ConfigFile(absl::string_view name, absl::string_view help);

  // A positional argument written to `*value`; positionals are filled in registration order. `name`
  // is how the synopsis and messages show it ("JOB", "JOB.textproto"): non-empty, made of
  // [A-Za-z0-9_.-]. REQUIRES: a kRequired positional is not registered after a kOptional one.
  void Positional(absl::string_view name, std::string* value, absl::string_view help,
                  Requirement requirement = kOptional);

  // Parses `args` as above and writes the values. On error some values may have been written
  // already. Call once.
  [[nodiscard]] absl::Status Parse(absl::Span<const std::string> args);

  // After Parse: whether --help / -h was given (then nothing else was checked or written).
  bool help_requested() const { return help_requested_; }
  // After Parse: whether the flag `name` appeared on the command line (or the positional `name`
  // was given). REQUIRES: registered.
  bool IsSet(absl::string_view name) const;

  // The synopsis, the description, one entry per positional ("arguments:") and one per flag
  // ("flags:") with its help and its default (or "required"), in registration order; ends in '\n'.
  std::string Help() const;

 private:
  enum class Type { kString, kInt, kDouble, kBool, kByteSize, kStringList };
  struct Flag {
    std::string name;
    Type type;
    void* value;
    std::string help;
    Requirement requirement;
    std::string default_text;
    bool set = false;
  };

  struct PositionalArgument {
    std::string name;
    std::string* value;
    std::string help;
    Requirement requirement;
    bool set = false;
  };

  void Add(absl::string_view name, Type type, void* value, absl::string_view help, Requirement requirement,
           std::string default_text);
  Flag* Find(absl::string_view name);
  absl::Status SetValue(Flag& flag, absl::string_view text);
  absl::Status SetPositional(absl::string_view arg);
  absl::Status UnknownFlag(absl::string_view name) const;
  // Applies the config file named in `args`, skipping the flags `args` gives themselves.
  absl::Status ApplyConfigFile(absl::Span<const std::string> args);
  std::string Where() const;  // "for 'slimfit <command>'"

  std::string command_;
  std::string invocation_;  // "slimfit <command>" unless SetInvocation
  std::string synopsis_;
  std::string description_;
  std::vector<Flag> flags_;
  std::vector<PositionalArgument> positionals_;
  size_t positionals_given_ = 0;
  std::string config_flag_;  // ConfigFile's name; empty when none
  std::string config_path_;
  bool help_requested_ = false;
};

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_FLAGS_H_
