#include "client/generate_command.h"

#include <cstdint>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags.h"
#include "client/local_model.h"
#include "nlohmann/json.hpp"
#include "performer/recurrent_model.h"
#include "performer/token_sampler.h"

namespace slimfit::client {
namespace {

constexpr int64_t kByteVocabulary = 256;

struct GenerateOptions {
  std::string prompt;
  std::string prompt_tokens;
  int64_t max_tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  int64_t seed = 0;
  int64_t stretch = 512;
  bool echo = true;
  bool json = false;
};

absl::StatusOr<std::vector<int64_t>> PromptTokens(const base::FlagSet& flags, const GenerateOptions& options,
                                                  int64_t vocab) {
  if (flags.IsSet("prompt") == flags.IsSet("prompt_tokens")) {
    return absl::InvalidArgumentError(
        "give the prompt as --prompt=TEXT or as --prompt_tokens=ID,ID,... (one of them)");
  }
  std::vector<int64_t> tokens;
  if (flags.IsSet("prompt")) {
    for (unsigned char byte : options.prompt) tokens.push_back(byte);
  } else {
    for (absl::string_view part : absl::StrSplit(options.prompt_tokens, ',')) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(part, &id)) {
        return absl::InvalidArgumentError(absl::StrCat("--prompt_tokens: \"", part, "\" is not a token id"));
      }
      tokens.push_back(id);
    }
  }
  if (tokens.empty())
    return absl::InvalidArgumentError("the prompt is empty: the model needs at least one token to follow");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " = ", tokens[i],
                                                     " is outside the model's vocabulary [0, ", vocab, ")"));
    }
  }
  return tokens;
}

}  // namespace

absl::Status RunGenerateCommand(absl::Span<const std::string> args, std::ostream& out) {
  GenerateOptions options;
  base::FlagSet flags(
      "generate", "slimfit generate --model=FILE --prompt=TEXT [--max_tokens=N] [flags]",
      "Generates text from a model, token by token, with the Performer's recurrent form: each\n"
      "layer keeps only its prefix-sum state, so memory does not grow with the text.");
  LocalModelFlags model_flags(flags);
  flags.String("prompt", &options.prompt, "the text to continue (its bytes are the tokens)",
               base::FlagSet::kOptionalNoDefault);
  flags.String("prompt_tokens", &options.prompt_tokens, "the prompt as token ids, comma-separated",
               base::FlagSet::kOptionalNoDefault);
  flags.Int("max_tokens", &options.max_tokens, "tokens to generate");
  flags.Double("temperature", &options.temperature, "sampling temperature (0: always the most likely token)");
  flags.Int("top_k", &options.top_k, "sample among the k most likely tokens (0: all)");
  flags.Int("seed", &options.seed, "random seed of the sampling (the same seed gives the same text)");
  flags.Int("stretch", &options.stretch,
            "prompt tokens run at once (memory grows with it, not with the text)");
  flags.Bool("echo", &options.echo, "print the prompt before the generated text");
  flags.Bool("json", &options.json, "print one JSON object at the end instead of streaming text");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    out << flags.Help();
    return absl::OkStatus();
  }
  if (options.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_tokens=", options.max_tokens, ": expected 0 or more"));
  }
  if (options.seed < 0)
    return absl::InvalidArgumentError(absl::StrCat("--seed=", options.seed, ": expected 0 or more"));
  const performer::SamplingOptions sampling{options.temperature, options.top_k};
  if (absl::Status s = performer::ValidateSamplingOptions(sampling); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", s.message()));
  }
  if (options.stretch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--stretch=", options.stretch, ": expected 1 or more"));
  }
  absl::StatusOr<LocalModel> loaded = model_flags.Load();
  if (!loaded.ok()) return loaded.status();
  const int64_t vocab = loaded->model.config().vocab;
  absl::StatusOr<std::vector<int64_t>> prompt = PromptTokens(flags, options, vocab);
  if (!prompt.ok()) return prompt.status();

  performer::ForwardOptions forward;
  forward.stretch = options.stretch;
  forward.feature_seed = loaded->feature_seed;
  absl::StatusOr<performer::RecurrentModel> decoder =
      performer::RecurrentModel::Create(loaded->model, forward);
  if (!decoder.ok()) return decoder.status();
  performer::TokenSampler sampler(sampling, static_cast<uint64_t>(options.seed));
  const bool bytes = vocab == kByteVocabulary && !flags.IsSet("prompt_tokens");
  auto print = [&](int64_t token, bool first) {
    if (bytes) {
      out << static_cast<char>(token);
    } else {
      out << (first ? "" : " ") << token;
    }
  };
  if (!options.json && options.echo) {
    for (size_t i = 0; i < prompt->size(); ++i) print((*prompt)[i], i == 0);
    out.flush();
  }

  const absl::Time start = absl::Now();
  std::vector<int64_t> generated;
  absl::StatusOr<at::Tensor> log_probs = decoder->Feed(*prompt);
  for (int64_t i = 0; i < options.max_tokens; ++i) {
    if (!log_probs.ok()) return log_probs.status();
    const int64_t token = sampler.Next(*log_probs);
    generated.push_back(token);
    if (!options.json) {
      print(token, !options.echo && i == 0);
      out.flush();
    }
    if (i + 1 < options.max_tokens) log_probs = decoder->Feed({token});
  }
  if (!log_probs.ok()) return log_probs.status();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!options.json) {
    out << "\n";
    return absl::OkStatus();
  }
  nlohmann::ordered_json json;
  json["model"] = loaded->path;
  json["prompt_tokens"] = prompt->size();
  json["generated_tokens"] = generated.size();
  json["tokens"] = generated;
  if (bytes) {
    json["text"] = std::string(generated.begin(), generated.end());
  } else {
    json["text"] = nullptr;
  }
  json["seconds"] = seconds;
  json["tokens_per_second"] = seconds > 0 ? static_cast<double>(generated.size()) / seconds : 0.0;
  json["state_bytes"] = decoder->state_bytes();
  out << json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  return absl::OkStatus();
}

}  // namespace slimfit::client
