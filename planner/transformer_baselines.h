// Memory and recomputation baselines for an ordinary softmax transformer, the comparison that
// `slimfit plan` prints next to its sliced-Performer plans: "a softmax transformer of the same
// width, depth and heads would need this much memory for this batch". Three attention layouts
// ("Saving Memory Using Padding-Free Transformer Layers during Finetuning") times four
// recomputation strategies (the accounting of Korthikanti et al., 2022), plus parameter,
// gradient and Adam state bytes so a total can be printed.
//
// Example: a 20B-class model, batches of 8 sequences with lengths uniform in 1..8192.
//   BaselineWorkload w;
//   w.shape.d_model = 6144; w.shape.layers = 44; w.shape.heads = 48;   // d_ff 0 means 4·d_model
//   w.shape.vocab_size = 50304;
//   w.batch = BatchSpec::Uniform(/*max_length=*/8192, /*batch_size=*/8);
//   absl::StatusOr<std::vector<BaselineRow>> rows = ComputeBaselines(w);
//   if (!rows.ok()) return rows.status();
//   std::cout << FormatBaselineTable(*rows);
//   // layout        recompute      activations   kept/layer  model state        total  overhead
//   // naive         none               4.6 TiB    107.3 GiB    301.7 GiB      4.9 TiB     +0.0%
//   // naive         attention        466.4 GiB      8.3 GiB    301.7 GiB    768.0 GiB    +14.8%
//   // ...
//   // padding-free  full              23.1 GiB    384.0 MiB    301.7 GiB    324.7 GiB    +33.3%
//
// Everything here is a pure function of its arguments: no state, no I/O, safe to call from any
// number of threads at once. Byte and FLOP counts are doubles because uniform batches give
// expectations; for an explicit list of lengths every count is an integer and exact below 2^53.
//
// ==== Notation ==================================================================================
// h = d_model, a = heads, f = d_ff, p = bytes per activation element (2 for bf16), m = 1 byte per
// dropout-mask element when dropout is on, else 0 (PyTorch stores masks as bytes, the padding-free article).
// A batch holds b sequences of lengths s_1..s_b; K = max_i s_i. Padded layouts (naive, flash) run
// every token-wise operation on b·K positions; the padding-free layout on Σ s_i positions.
//
// ==== Activation bytes per layer (what the forward pass caches for backward) ====================
// Source: the padding-free article, §"Naive Attention" items 1–9 (the same accounting as Korthikanti et al.
// 2022, "Reducing activation recomputation in large transformer models", eq. 1), restated per tensor so that
// p, f and dropout can vary. Multi-head attention (a query, key and value heads each), a GeLU MLP. With T =
// b·K (padded) or Σ s_i (padding-free):
//   layer norms (2, each caches its input)   2p·h·T
//   attention, linear part                   (5p + m)·h·T     QKV input, Q, K, V, out-proj input,
//                                                             output-dropout mask
//   attention, quadratic part (naive only)   (2p + m)·a·b·K²  softmax output, dropout mask,
//                                                             dropout output (p·a·b·K² without
//                                                             dropout: the softmax output only)
//   feed-forward (GeLU MLP)                  ((p + m)·h + 2p·f)·T   input of linear 1, GeLU input,
//                                                             input of linear 2 (both f wide),
//                                                             output-dropout mask
// At p = 2, m = 1, f = 4h this is 4 + 11 + 19 = 34 bytes per token and hidden unit plus 5·a·K²·b:
// the checkpointing article's "(11 + 19 + 4)·S·B·H + 5·n_heads·S²·B" and the padding-free article's
// M_naive = K·b·h·(34 + 5·a·K/h). The feed-forward generalisation to any f keeps the two f-wide
// tensors at p bytes (at f = 4h they are the 16 of the 19). NOTE: the checkpointing article calls this count
// "elements" and says to multiply by 2 for bf16; the padding-free article derives it in bytes with 2-byte
// values and 1-byte masks, and its table (below) reproduces only with the byte reading. We implement bytes;
// the checkpointing article's "×2" would double-count.
//
// FlashAttention (the padding-free article §"Transformer Layer with FlashAttention"): the K² term disappears;
// the kernel runs on the unpadded tokens and caches its output and two softmax statistics per head. The
// seed's text states 2·Σs·(h + 2a) bytes for these, but its closed form
//   M_flash = K·b·h·(34 + Σs/(K·b)·(1 + 2a/h)) = 34·h·b·K + Σs·(h + 2a)
// and its table use Σs·(h + 2a); we follow the closed form (the table is the seed's evidence) and
// scale it with the element size:  flash state = (p/2)·(h + 2a)·Σs  bytes, kept in the attention
// block. The rest of the layer stays padded (T = b·K).
// Padding-free (the padding-free article §"Padding-Free Transformer Layer"): FlashAttention plus packing,
// every token-wise tensor has Σs rows: M_padding_free = Σs·h·(35 + 2a/h) at p = 2, m = 1, f = 4h. Not counted
// (as in both seeds): LayerNorm mean/variance (2·T values), FlashAttention's RNG state, the padding mask
// (cached once per model), embedding and logit activations, temporary buffers.
//
// ==== Recomputation (the checkpointing article)
// ================================================================== The layer's activations split into
// attention (linear + quadratic or flash state), feed-forward and layer-norm parts. A strategy discards some
// parts during the forward pass and re-runs them from a checkpoint during backward. Each strategy other than
// kNone keeps the layer input, p·h·T bytes ("CHECKPOINT_SBH_PER_LAYER = 1" of the checkpointing article, at p
// bytes per element).
//   kNone          keeps attention + feed-forward + layer norms
//   kAttention     keeps feed-forward + layer norms + checkpoint (both the 11·SBH and the S² term
//                  are gone)
//   kFeedForward   keeps attention + layer norms + checkpoint (the S² term remains)
//   kFull          keeps only the checkpoint; the whole layer, layer norms included, is re-run.
//                  (the checkpointing article's "both" keeps the layer norms as well; a full-layer
//                  checkpoint, as in Megatron-LM's full recomputation, keeps only the layer input.)
// Peak activation bytes = layers · kept + one layer's recomputed part: during the backward of a
// layer its discarded activations exist again, while every layer below still holds its kept part.
//
// Compute overhead as a fraction of one training step, step = forward + backward ≈ 3 forwards
// (the checkpointing article). Forward FLOPs per layer (a multiply-add counts 2):
//   QKV and output projections   8·h²·T             (4 matmuls of T×h by h×h)
//   scores QKᵀ and weighted sum  4·h·Q              Q = b·K² (naive), Σ s_i² (flash, padding-free:
//                                                   the kernel only visits real tokens)
//   feed-forward                 4·h·f·T            (16·h²·T at f = 4h)
// Layer norms, softmax and activation functions are not counted. Overheads:
//   kAttention F_attn / (3·F), kFeedForward F_ffn / (3·F), kFull 1/3, kNone 0,
// F_attn = projections + scores, F_ffn = feed-forward, F = F_attn + F_ffn. For short sequences
// (S ≪ h, f = 4h) that is 11.1 % / 22.2 %, at S = h 14.3 % / 19.0 % (the checkpointing article's ranges). For
// a uniform batch the ratio of expected FLOPs is reported.
//
// ==== Model state ===============================================================================
// Parameters per layer 4h² + 4h (attention with biases) + 2hf + f + h (MLP with biases) + 4h (two
// layer norms); plus vocab·h (embedding, output head tied) and 2h (final layer norm). Gradients
// have the parameters' element size; Adam keeps two fp32 moments, 8 bytes per parameter (the checkpointing
// article: "4N params, 4N grads, 8N Adam" at fp32).
//
// ==== Uniform batches (the padding-free article §"Motivation")
// ================================================== S_i ~ U{1..L} i.i.d., K = max S_i, P(K ≤ k) = (k/L)^b.
// Computed exactly (up to double rounding):
//   E[K]  = Σ_{k=0}^{L−1} (1 − (k/L)^b)            (tail sum of P(K > k))
//   E[K²] = Σ_{k=0}^{L−1} (2k + 1)·(1 − (k/L)^b)   (K² = Σ_{k<K} (2k + 1))
//   E[Σ S_i] = b·(L + 1)/2,  E[Σ S_i²] = b·(L + 1)·(2L + 1)/6.
// Every byte count above is linear in K, K², Σ s_i, so its expectation is the formula evaluated at
// these moments. The padding-free article's 20B table (h 6144, a 48, f 24576, "GB" = GiB, b = 8 — the batch
// size the article does not print but its numbers imply) is reproduced to within 0.001 GiB.

#ifndef SLIMFIT_PLANNER_TRANSFORMER_BASELINES_H_
#define SLIMFIT_PLANNER_TRANSFORMER_BASELINES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace slimfit::planner {

// Bounds accepted by validation. They keep every count finite and exact, and bound the O(L) loop
// of the uniform expectations (L ≤ 2^24 takes well under a second).
inline constexpr int64_t kMaxBaselineWidth = int64_t{1} << 20;  // d_model, d_ff / 4
inline constexpr int64_t kMaxBaselineLayers = int64_t{1} << 16;
inline constexpr int64_t kMaxBaselineVocab = int64_t{1} << 24;
inline constexpr int64_t kMaxBaselineSequenceLength = int64_t{1} << 24;  // tokens per sequence
inline constexpr int64_t kMaxBaselineBatchSize = int64_t{1} << 20;       // sequences per batch

enum class AttentionLayout {
  kNaive,        // materialised K×K scores per head, every sequence padded to K
  kFlash,        // FlashAttention on unpadded tokens, the rest of the layer padded to K
  kPaddingFree,  // FlashAttention + packing: every tensor follows the real token count
};
// "naive", "flash", "padding-free".
absl::string_view AttentionLayoutName(AttentionLayout layout);

enum class Recompute { kNone, kAttention, kFeedForward, kFull };
// "none", "attention", "feed-forward", "full".
absl::string_view RecomputeName(Recompute recompute);

// The softmax transformer being compared: same width, depth and heads as the Performer.
struct TransformerShape {
  int64_t d_model = 0;  // h; must be a multiple of heads
  int64_t layers = 0;
  int64_t heads = 0;          // a
  int64_t d_ff = 0;           // f; 0 means 4·d_model
  int64_t vocab_size = 0;     // 0: no embedding counted in the model state
  int bytes_per_element = 2;  // activations: 1, 2 (bf16/fp16), 4 (fp32) or 8
  bool dropout = true;        // dropout masks cached at 1 byte per element (both seeds assume it)
};

// OK, or INVALID_ARGUMENT naming the first offending field: non-positive d_model, layers, heads,
// negative d_ff or vocab_size, d_model not divisible by heads, bytes_per_element not in
// {1, 2, 4, 8}, or a value above the kMaxBaseline* bounds.
absl::Status ValidateTransformerShape(const TransformerShape& shape);

// d_ff with the default applied: shape.d_ff, or 4·d_model when it is 0. REQUIRES: valid shape.
int64_t EffectiveFeedForwardWidth(const TransformerShape& shape);

// The sequences of one batch: b lengths uniform in 1..L, or an explicit list.
struct BatchSpec {
  enum class Kind { kUniform, kExplicit };
  Kind kind = Kind::kUniform;
  int64_t max_length = 0;        // kUniform: L
  int64_t batch_size = 0;        // kUniform: b
  std::vector<int64_t> lengths;  // kExplicit: s_1..s_b, each padded to their max where padded

  static BatchSpec Uniform(int64_t max_length, int64_t batch_size);
  static BatchSpec Explicit(std::vector<int64_t> lengths);
};

// OK, or INVALID_ARGUMENT: uniform with L or b outside [1, bound]; explicit with no lengths, or a
// length outside [1, kMaxBaselineSequenceLength] (the message names its index).
absl::Status ValidateBatchSpec(const BatchSpec& batch);

// What the formulas need from a batch; expectations for kUniform, exact values for kExplicit.
struct BatchMoments {
  double sequences = 0;            // b
  double max_length = 0;           // E[K]
  double max_length_squared = 0;   // E[K²]
  double tokens = 0;               // E[Σ s_i]
  double sum_squared_lengths = 0;  // E[Σ s_i²]
};

// Errors: those of ValidateBatchSpec. O(L) for kUniform, O(b) for kExplicit.
absl::StatusOr<BatchMoments> ComputeBatchMoments(const BatchSpec& batch);

// One layer's cached activations, in bytes, by component (see "Activation bytes per layer").
struct LayerActivationBytes {
  double attention = 0;            // whole attention block, attention_quadratic included
  double attention_quadratic = 0;  // the K² part of `attention` (naive layout only; else 0)
  double feed_forward = 0;
  double layer_norm = 0;
  double layer_input = 0;  // one [T, h] tensor: the checkpoint a recomputing strategy keeps

  double total() const { return attention + feed_forward + layer_norm; }  // no recomputation
};

// Errors: those of ValidateTransformerShape. `moments` must come from ComputeBatchMoments.
absl::StatusOr<LayerActivationBytes> ComputeLayerActivations(const TransformerShape& shape,
                                                             const BatchMoments& moments,
                                                             AttentionLayout layout);

// One layer's forward FLOPs over the whole batch (see "Compute overhead").
struct LayerForwardFlops {
  double projections = 0;   // 8·h²·T
  double scores = 0;        // 4·h·Q
  double feed_forward = 0;  // 4·h·f·T

  double attention() const { return projections + scores; }
  double total() const { return projections + scores + feed_forward; }
};

// Errors: those of ValidateTransformerShape.
absl::StatusOr<LayerForwardFlops> ComputeLayerForwardFlops(const TransformerShape& shape,
                                                           const BatchMoments& moments,
                                                           AttentionLayout layout);

// What a strategy keeps per layer, what it re-materialises during one layer's backward, the peak
// over the model, and the compute it adds. Pure arithmetic on the two breakdowns above.
struct RecomputeCost {
  double kept_bytes_per_layer = 0;
  double recomputed_bytes_per_layer = 0;
  double activation_bytes = 0;  // layers · kept + recomputed
  double compute_overhead_fraction = 0;
};
RecomputeCost ComputeRecomputeCost(const LayerActivationBytes& activations, const LayerForwardFlops& flops,
                                   int64_t layers, Recompute recompute);

struct ModelStateOptions {
  int parameter_bytes_per_element = 4;  // parameters and gradients: 1, 2, 4 or 8
  bool adam = true;                     // add Adam's two fp32 moments (8 bytes per parameter)
};

struct ModelStateBytes {
  int64_t parameters = 0;
  double parameter_bytes = 0;
  double gradient_bytes = 0;
  double optimizer_bytes = 0;  // 0 without Adam

  double total() const { return parameter_bytes + gradient_bytes + optimizer_bytes; }
};

// Errors: those of ValidateTransformerShape; INVALID_ARGUMENT for parameter_bytes_per_element not
// in {1, 2, 4, 8}.
absl::StatusOr<ModelStateBytes> ComputeModelState(const TransformerShape& shape,
                                                  const ModelStateOptions& options);

struct BaselineWorkload {
  TransformerShape shape;
  BatchSpec batch;
  ModelStateOptions state;
};

struct BaselineRow {
  AttentionLayout layout = AttentionLayout::kNaive;
  Recompute recompute = Recompute::kNone;
  double activation_bytes = 0;           // peak over the model: layers · kept + one layer recomputed
  double total_bytes = 0;                // activation_bytes + model state
  double compute_overhead_fraction = 0;  // extra FLOPs / FLOPs of one training step
  double kept_bytes_per_layer = 0;
  double recomputed_bytes_per_layer = 0;
  double model_state_bytes = 0;
};

// All 12 rows, layouts in the order naive, flash, padding-free and, within each, recompute in the
// order none, attention, feed-forward, full. Errors: those of the validators above.
absl::StatusOr<std::vector<BaselineRow>> ComputeBaselines(const BaselineWorkload& workload);

// A fixed-width plain-text table, one header line and one line per row, each ending in '\n':
// layout, recompute, activations, activations per layer kept, model state, total, overhead (as
// "+11.1%"). Byte columns use FormatBytes.
std::string FormatBaselineTable(absl::Span<const BaselineRow> rows);

// Binary units with one decimal: "512 B", "1.0 KiB", "37.5 MiB", "1.2 TiB" (up to EiB). A value
// that would print as "1024.0" of a unit moves to the next unit. Negative or non-finite input
// prints as "-" (no count here produces one).
std::string FormatBytes(double bytes);

// Lengths from a file's contents, one positive integer per line. Surrounding whitespace (also
// "\r") and blank lines are ignored. INVALID_ARGUMENT, naming the 1-based line, for anything else
// on a line, a length < 1 or > kMaxBaselineSequenceLength; and when no length is found at all.
absl::StatusOr<std::vector<int64_t>> ParseLengthsFile(absl::string_view contents);

// A uniform batch from a flag value "uniform:L=<max length>,b=<batch size>" (keys in either order,
// spaces around tokens allowed). INVALID_ARGUMENT for another kind, a missing, repeated or
// unknown key, a non-integer value, or values ValidateBatchSpec rejects. Explicit lists come from
// ParseLengthsFile.
absl::StatusOr<BatchSpec> ParseBatchSpec(absl::string_view spec);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_TRANSFORMER_BASELINES_H_
