#include "base/flags.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/toml_file.h"

namespace slimfit::base {
namespace {

struct ByteUnit {
  absl::string_view name;
  int64_t bytes;
};

constexpr ByteUnit kByteUnits[] = {
    {"B", 1},
    {"KB", 1000},
    {"MB", 1000 * 1000},
    {"GB", 1000 * 1000 * 1000},
    {"TB", int64_t{1000} * 1000 * 1000 * 1000},
    {"KiB", int64_t{1} << 10},
    {"MiB", int64_t{1} << 20},
    {"GiB", int64_t{1} << 30},
    {"TiB", int64_t{1} << 40},
};

// Digits of a fraction beyond this cannot change the rounded-down result for any unit here (a
// unit ≤ 2^40 < 10^13 makes a whole byte out of 13 digits at most).
constexpr size_t kMaxFractionDigits = 18;

bool IsDigits(absl::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// Levenshtein distance, for "did you mean" suggestions between short flag names.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A programming error in how a command registers its flags; no user input can cause it.
[[noreturn]] void RegistrationBug(absl::string_view what, absl::string_view name) {
  std::fprintf(stderr, "slimfit: internal error: flag --%s: %s\n", std::string(name).c_str(),
               std::string(what).c_str());
  std::abort();
}

absl::StatusOr<bool> ParseBoolValue(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "1" || lower == "yes") return true;
  if (lower == "false" || lower == "0" || lower == "no") return false;
  return absl::InvalidArgumentError("expected true or false");
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view flag, absl::string_view text) {
  const std::string prefix =
      flag.empty() ? absl::StrCat("'", text, "': ") : absl::StrCat("--", flag, "=", text, ": ");
  auto error = [&](absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat(prefix, what)); };
  constexpr absl::string_view kExpected =
      "expected a byte size such as 1048576, 512MiB or 1.5GB (units B; KB, MB, GB, TB = powers "
      "of 1000; KiB, MiB, GiB, TiB = powers of 1024)";
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (rest.empty()) return error(absl::StrCat("empty; ", kExpected));
  if (rest.front() == '-') return error("a byte size cannot be negative");
  if (rest.front() == '+') return error(absl::StrCat("no sign allowed; ", kExpected));

  // Split "<integer>[.<fraction>]<unit>".
  size_t end = 0;
  while (end < rest.size() && (absl::ascii_isdigit(rest[end]) || rest[end] == '.')) ++end;
  const absl::string_view number = rest.substr(0, end);
  const absl::string_view unit_text = absl::StripLeadingAsciiWhitespace(rest.substr(end));
  const size_t dot = number.find('.');
  const absl::string_view integer = number.substr(0, dot);
  const absl::string_view fraction =
      dot == absl::string_view::npos ? absl::string_view() : number.substr(dot + 1);
  if (number.empty() || number == "." || !IsDigits(integer) || !IsDigits(fraction)) {
    return error(absl::StrCat("not a number; ", kExpected));
  }

  int64_t unit = 0;
  for (const ByteUnit& candidate : kByteUnits) {
    if (absl::EqualsIgnoreCase(unit_text, candidate.name)) unit = candidate.bytes;
  }
  if (unit_text.empty()) unit = 1;
  if (unit == 0) return error(absl::StrCat("unknown unit '", unit_text, "'; ", kExpected));
  const bool has_fraction = std::any_of(fraction.begin(), fraction.end(), [](char c) { return c != '0'; });
  if (unit == 1 && has_fraction) {
    return error("a byte count must be a whole number (use a unit such as KiB for fractions)");
  }

  // Exact: value = integer·unit + floor(fraction·unit / 10^digits). 128 bits hold every
  // intermediate: integer < 10^20 (checked) times unit ≤ 2^40.
  const absl::uint128 kLimit = absl::uint128(std::numeric_limits<int64_t>::max());
  absl::string_view integer_digits = integer;
  while (integer_digits.size() > 1 && integer_digits.front() == '0') integer_digits.remove_prefix(1);
  if (integer_digits.size() > 19) return error("too large (more than 2^63 - 1 bytes)");
  absl::uint128 whole = 0;
  for (char c : integer_digits) whole = whole * 10 + static_cast<uint64_t>(c - '0');
  absl::uint128 value = whole * static_cast<uint64_t>(unit);
  const absl::string_view kept = fraction.substr(0, std::min(fraction.size(), kMaxFractionDigits));
  absl::uint128 numerator = 0;
  absl::uint128 denominator = 1;
  for (char c : kept) {
    numerator = numerator * 10 + static_cast<uint64_t>(c - '0');
    denominator *= 10;
  }
  value += numerator * static_cast<uint64_t>(unit) / denominator;
  if (value > kLimit) return error("too large (more than 2^63 - 1 bytes)");
  return static_cast<int64_t>(absl::Uint128Low64(value));
}

FlagSet::FlagSet(std::string command, std::string synopsis, std::string description)
    : command_(std::move(command)),
      invocation_(absl::StrCat("slimfit ", command_)),
      synopsis_(std::move(synopsis)),
      description_(std::move(description)) {}

void FlagSet::Add(absl::string_view name, Type type, void* value, absl::string_view help,
                  Requirement requirement, std::string default_text) {
  if (name.empty() || name == "help" || !std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
      })) {
    RegistrationBug("invalid name", name);
  }
  if (type == Type::kBool && absl::StartsWith(name, "no")) {
    RegistrationBug("a Bool flag may not start with 'no' (--no<name> negates)", name);
  }
  if (Find(name) != nullptr) RegistrationBug("registered twice", name);
  if (value == nullptr) RegistrationBug("null destination", name);
  if (requirement == kOptionalNoDefault) default_text.clear();
  flags_.push_back(
      Flag{std::string(name), type, value, std::string(help), requirement, std::move(default_text)});
}

void FlagSet::String(absl::string_view name, std::string* value, absl::string_view help,
                     Requirement requirement) {
  Add(name, Type::kString, value, help, requirement, *value);
}

void FlagSet::Int(absl::string_view name, int64_t* value, absl::string_view help, Requirement requirement) {
  Add(name, Type::kInt, value, help, requirement, absl::StrCat(*value));
}

void FlagSet::Double(absl::string_view name, double* value, absl::string_view help, Requirement requirement) {
  Add(name, Type::kDouble, value, help, requirement, absl::StrFormat("%g", *value));
}

void FlagSet::Bool(absl::string_view name, bool* value, absl::string_view help) {
  Add(name, Type::kBool, value, help, kOptional, *value ? "true" : "");
}

void FlagSet::ByteSize(absl::string_view name, int64_t* value, absl::string_view help,
                       Requirement requirement) {
  Add(name, Type::kByteSize, value, help, requirement, *value == 0 ? "" : absl::StrCat(*value));
}

void FlagSet::StringList(absl::string_view name, std::vector<std::string>* values, absl::string_view help) {
  Add(name, Type::kStringList, values, help, kOptional, values == nullptr ? "" : absl::StrJoin(*values, ","));
}

void FlagSet::Positional(absl::string_view name, std::string* value, absl::string_view help,
                         Requirement requirement) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-';
      })) {
    RegistrationBug("invalid positional name", name);
  }
  if (value == nullptr) RegistrationBug("null destination", name);
  if (requirement == kRequired && !positionals_.empty() && positionals_.back().requirement == kOptional) {
    RegistrationBug("a required positional after an optional one", name);
  }
  for (const PositionalArgument& positional : positionals_) {
    if (positional.name == name) RegistrationBug("registered twice", name);
  }
  positionals_.push_back(PositionalArgument{std::string(name), value, std::string(help), requirement});
}

FlagSet::Flag* FlagSet::Find(absl::string_view name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

bool FlagSet::IsSet(absl::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return flag.set;
  }
  for (const PositionalArgument& positional : positionals_) {
    if (positional.name == name) return positional.set;
  }
  RegistrationBug("IsSet on an unregistered flag", name);
}

std::string FlagSet::Where() const { return absl::StrCat("for '", invocation_, "'"); }

absl::Status FlagSet::UnknownFlag(absl::string_view name) const {
  std::string message = absl::StrCat("unknown flag --", name, " ", Where());
  const Flag* closest = nullptr;
  size_t best = 3;  // suggest only near misses: at most two edits, or a prefix
  for (const Flag& flag : flags_) {
    size_t distance = EditDistance(name, flag.name);
    // A truncated or extended name ("--out" for "--output", "--thread" for "--threads") is a
    // near miss too, as long as the common part is not trivially short.
    const absl::string_view shorter = name.size() < flag.name.size() ? name : flag.name;
    const absl::string_view longer = name.size() < flag.name.size() ? flag.name : name;
    if (shorter.size() >= 3 && absl::StartsWith(longer, shorter)) distance = std::min<size_t>(distance, 2);
    if (distance < best) {
      best = distance;
      closest = &flag;
    }
  }
  if (closest != nullptr) absl::StrAppend(&message, "; did you mean --", closest->name, "?");
  absl::StrAppend(&message, " (see '", invocation_, " --help')");
  return absl::InvalidArgumentError(message);
}

absl::Status FlagSet::SetValue(Flag& flag, absl::string_view text) {
  auto malformed = [&](absl::string_view expected) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag.name, "=", text, ": ", expected, " ", Where()));
  };
  switch (flag.type) {
    case Type::kString:
      *static_cast<std::string*>(flag.value) = std::string(text);
      return absl::OkStatus();
    case Type::kInt: {
      int64_t parsed = 0;
      if (!absl::SimpleAtoi(text, &parsed)) return malformed("expected an integer");
      *static_cast<int64_t*>(flag.value) = parsed;
      return absl::OkStatus();
    }
    case Type::kDouble: {
      double parsed = 0;
      if (!absl::SimpleAtod(text, &parsed) || !std::isfinite(parsed)) {
        return malformed("expected a finite number");
      }
      *static_cast<double*>(flag.value) = parsed;
      return absl::OkStatus();
    }
    case Type::kBool: {
      absl::StatusOr<bool> parsed = ParseBoolValue(text);
      if (!parsed.ok()) return malformed("expected true or false");
      *static_cast<bool*>(flag.value) = *parsed;
      return absl::OkStatus();
    }
    case Type::kByteSize: {
      absl::StatusOr<int64_t> parsed = ParseByteSize(flag.name, text);
      if (!parsed.ok()) return parsed.status();
      *static_cast<int64_t*>(flag.value) = *parsed;
      return absl::OkStatus();
    }
    case Type::kStringList: {
      const std::vector<std::string> items = absl::StrSplit(text, ',');
      for (const std::string& item : items) {
        if (item.empty()) return malformed("expected a comma-separated list of non-empty values");
      }
      auto* values = static_cast<std::vector<std::string>*>(flag.value);
      values->insert(values->end(), items.begin(), items.end());
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unhandled flag type");
}

void FlagSet::ConfigFile(absl::string_view name, absl::string_view help) {
  config_flag_ = std::string(name);
  String(name, &config_path_, help, kOptionalNoDefault);
}

absl::Status FlagSet::ApplyConfigFile(absl::Span<const std::string> args) {
  // The file's path, and the flags the command line gives itself (which win over the file).
  std::string path;
  std::vector<std::string> given;
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    if (!absl::StartsWith(args[i], "--")) continue;
    const absl::string_view body = absl::string_view(args[i]).substr(2);
    const absl::string_view name = body.substr(0, body.find('='));
    given.emplace_back(name);
    if (name != config_flag_) continue;
    if (body.size() > name.size()) {
      path = std::string(body.substr(name.size() + 1));
    } else if (i + 1 < args.size()) {
      path = args[i + 1];
    }
  }
  if (path.empty()) return absl::OkStatus();  // Parse reports a --config without a value
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> entries = ReadFlatToml(path);
  if (!entries.ok()) {
    return absl::Status(entries.status().code(),
                        absl::StrCat("--", config_flag_, ": ", entries.status().message()));
  }
  for (const auto& [key, text] : *entries) {
    Flag* flag = Find(key);
    if (flag == nullptr || key == config_flag_) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", UnknownFlag(key).message()));
    }
    // Structured bindings cannot be captured by a lambda before C++20 (clang refuses it).
    const std::string& flag_key = key;
    const bool overridden = std::any_of(given.begin(), given.end(), [&](const std::string& name) {
      return name == flag_key || (flag->type == Type::kBool && name == absl::StrCat("no", flag_key));
    });
    if (overridden) continue;
    if (absl::Status s = SetValue(*flag, text); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
    }
    flag->set = true;
  }
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(absl::Span<const std::string> args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
  }
  if (!config_flag_.empty()) {
    if (absl::Status s = ApplyConfigFile(args); !s.ok()) return s;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const absl::string_view arg = args[i];
    if (arg == "--") {
      for (++i; i < args.size(); ++i) {
        if (absl::Status s = SetPositional(args[i]); !s.ok()) return s;
      }
      break;
    }
    if (!absl::StartsWith(arg, "--")) {
      if (absl::StartsWith(arg, "-") && arg.size() > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("flags start with two dashes: write -", arg, " instead of ", arg, " ", Where()));
      }
      if (absl::Status s = SetPositional(arg); !s.ok()) return s;
      continue;
    }
    const absl::string_view body = arg.substr(2);
    const size_t equals = body.find('=');
    const absl::string_view name = body.substr(0, equals);
    const bool inline_value = equals != absl::string_view::npos;
    const absl::string_view value = inline_value ? body.substr(equals + 1) : absl::string_view();

    Flag* flag = Find(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      Flag* positive = Find(name.substr(2));
      if (positive != nullptr && positive->type == Type::kBool) {
        if (inline_value) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value; write --",
                                                         positive->name, "=", value, " ", Where()));
        }
        flag = positive;
        negated = true;
      }
    }
    if (flag == nullptr) return UnknownFlag(name);
    if (flag->set && flag->type != Type::kStringList) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag->name, " given more than once ", Where()));
    }
    flag->set = true;

    if (flag->type == Type::kBool) {
      if (negated) {
        *static_cast<bool*>(flag->value) = false;
      } else if (inline_value) {
        if (absl::Status s = SetValue(*flag, value); !s.ok()) return s;
      } else {
        *static_cast<bool*>(flag->value) = true;
      }
      continue;
    }
    if (inline_value) {
      if (absl::Status s = SetValue(*flag, value); !s.ok()) return s;
      continue;
    }
    if (i + 1 >= args.size() || absl::StartsWith(args[i + 1], "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag->name, " needs a value (--", flag->name, "=VALUE) ", Where()));
    }
    ++i;
    if (absl::Status s = SetValue(*flag, args[i]); !s.ok()) return s;
  }
  for (const PositionalArgument& positional : positionals_) {
    if (positional.requirement == kRequired && !positional.set) {
      return absl::InvalidArgumentError(absl::StrCat("missing argument ", positional.name, " ", Where(),
                                                     " (see '", invocation_, " --help')"));
    }
  }
  for (const Flag& flag : flags_) {
    if (flag.requirement == kRequired && !flag.set) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing --", flag.name, " ", Where(), " (see '", invocation_, " --help')"));
    }
  }
  return absl::OkStatus();
}

absl::Status FlagSet::SetPositional(absl::string_view arg) {
  if (positionals_given_ < positionals_.size()) {
    PositionalArgument& positional = positionals_[positionals_given_++];
    *positional.value = std::string(arg);
    positional.set = true;
    return absl::OkStatus();
  }
  if (positionals_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", arg, "' ", Where(), ", which takes only flags"));
  }
  std::vector<std::string> names;
  for (const PositionalArgument& positional : positionals_) names.push_back(positional.name);
  return absl::InvalidArgumentError(absl::StrCat(
      "unexpected argument '", arg, "' ", Where(), ", which takes ",
      positionals_.size() == 1 ? "one argument" : absl::StrCat(positionals_.size(), " arguments"), " (",
      absl::StrJoin(names, " "), ")"));
}

std::string FlagSet::Help() const {
  std::string text = absl::StrCat("usage: ", synopsis_, "\n");
  if (!description_.empty()) absl::StrAppend(&text, "\n", description_, "\n");
  constexpr size_t kColumn = 30;
  auto entry = [&](const std::string& left, const std::string& right) {
    std::string line = absl::StrCat("  ", left);
    if (line.size() + 2 > kColumn) {
      absl::StrAppend(&text, line, "\n", std::string(kColumn, ' '), right, "\n");
    } else {
      absl::StrAppend(&text, line, std::string(kColumn - line.size(), ' '), right, "\n");
    }
  };
  if (!positionals_.empty()) {
    absl::StrAppend(&text, "\narguments:\n");
    for (const PositionalArgument& positional : positionals_) {
      entry(positional.name, positional.requirement == kRequired
                                 ? absl::StrCat(positional.help, " (required)")
                                 : positional.help);
    }
  }
  absl::StrAppend(&text, "\nflags:\n");
  for (const Flag& flag : flags_) {
    std::string left = absl::StrCat("--", flag.name);
    switch (flag.type) {
      case Type::kString:
        absl::StrAppend(&left, "=TEXT");
        break;
      case Type::kInt:
        absl::StrAppend(&left, "=N");
        break;
      case Type::kDouble:
        absl::StrAppend(&left, "=X");
        break;
      case Type::kBool:
        break;
      case Type::kByteSize:
        absl::StrAppend(&left, "=SIZE");
        break;
      case Type::kStringList:
        absl::StrAppend(&left, "=A[,B...]");
        break;
    }
    std::string right = flag.help;
    if (flag.requirement == kRequired) {
      absl::StrAppend(&right, " (required)");
    } else if (!flag.default_text.empty()) {
      absl::StrAppend(&right, " (default: ", flag.default_text, ")");
    }
    entry(left, right);
  }
  entry("--help", "print this help and exit");
  return text;
}

}  // namespace slimfit::base
