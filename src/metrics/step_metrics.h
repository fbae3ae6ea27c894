// A training step's metrics record: StepMetrics, and its fields described once, in
// kStepMetricFields (as ggml's type-traits table describes its types). The metrics JSONL line
// (metrics_json_line) and its reader (step_metrics_from_json), TensorBoard's scalars and
// histograms (metrics/tensorboard.cpp) and the check of docs/metrics.md's tables
// (tests/test_step_metrics.cpp) are all made from that table: a new metric is a member below
// and its row in the table (docs/architecture.md, "A new metric").
#pragma once
#include <cstdint>
#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <variant>
#include <vector>

namespace moet {

// Fields left NaN are "not measured this step": the progress line leaves them out, the JSONL
// record leaves optional ones out and writes null for required ones.
struct StepMetrics {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

  int64_t step = 0;             // steps done (1-based: the step that just finished)
  int64_t total_steps = 0;      // 0 when unknown
  double loss = kNone;          // total training loss (what is optimised)
  double lm_loss = kNone;       // next-token cross-entropy
  double mtp_loss = kNone;      // multi-token-prediction loss (mean over modules, unweighted)
  double balance_loss = kNone;  // sequence-wise balance loss (unweighted sum over MoE layers)
  double z_loss = kNone;        // router z-loss (unweighted)
  double eval_loss = kNone;     // held-out lm loss, when evaluated this step
  double eval_loss_se = kNone;  // its standard error over the evaluated batches
  double lr = kNone;
  double grad_norm = kNone;        // global norm before clipping
  double tokens_per_s = kNone;     // the global batch's tokens / step_time_s
  double tflops = kNone;           // model TFLOP/s (Megatron's formula) per device (rank)
  double mfu = kNone;              // fraction (0..1) of the device peak
  double max_expert_load = kNone;  // max over experts of load / mean load (1 = balanced)
  int64_t tokens = 0;              // tokens trained on so far
  double step_time_s = kNone;
  double data_wait_s = kNone;  // seconds the step waited for its batch (0 when data keep up)
  // Communication (under mpirun): seconds in the expert all-to-alls (dispatch + combine, forward
  // and backward), communication time not hidden behind compute, gradient reduction seconds,
  // and bytes this rank sent to other ranks: comm_bytes is all of it (the expert exchanges'
  // payload + grad_sync_bytes), grad_sync_bytes the gradient reductions' (and ZeRO-1's
  // parameter all-gather's) part (DataParallel::take_sync_bytes).
  double a2a_s = kNone;
  double exposed_comm_s = kNone;
  double ep_load_imbalance = kNone;  // Σ layers max over EP ranks of expert rows / Σ mean
  double a2a_exposed_s = kNone;      // the all-to-all part of exposed_comm_s
  double grad_sync_s = kNone;
  double comm_bytes = kNone;
  double grad_sync_bytes = kNone;
  double comm_bytes_other_nodes = kNone;  // the part of comm_bytes that left the node
  // --tp: seconds rank 0 spent in the layers' collectives over its tensor-parallel group and the
  // bytes it sent there (part of comm_bytes).
  double tp_comm_s = kNone;
  double tp_bytes = kNone;
  double elapsed_s = kNone;
  double eta_s = kNone;
  double peak_rss_mb = kNone;  // the process's peak resident set size so far (MB)
  double save_s = kNone;       // seconds a checkpoint save held up this step (async: the copy)
  // --pp: the pipeline's passes took pp_run_s (the slowest rank), of which the busiest rank
  // computed for busy: pp_bubble = pp_run_s / busy − 1. pp_schedule_s is what the schedule
  // (simulate_pipeline, the generator `moet simulate` uses) predicts from this step's measured
  // pass times of every virtual stage.
  double pp_run_s = kNone;
  double pp_bubble = kNone;
  // --pp: bytes every rank together sent between pipeline stages this step (activations, their
  // gradients, MTP gradients, the embedding replica); rank 0's part is in comm_bytes.
  double pp_bytes = kNone;
  double pp_schedule_s = kNone;
  // --pp: each pipeline rank's idle time this step (pp_run_s − its compute), and the schedule's
  // formula for it (pipeline_bubble_formula_s: 1f1b (P−1)(F+B), zb1p (P−1)(F+B−2W), dualpipev
  // (P−1)(F&B+B−3W); left out where it has no closed form: interleaved with --vpp, zbv, combined
  // 1F1B) from the mean measured passes of one virtual stage: pp_forward_s (F), pp_backward_s
  // (a whole backward: B, or I and its W), pp_weight_s (W, timed apart; 0 without W passes).
  std::vector<double> pp_idle_s;
  double pp_idle_formula_s = kNone;
  double pp_forward_s = kNone;
  double pp_backward_s = kNone;
  double pp_weight_s = kNone;
  // World size: the progress line labels rates global (tok/s) or per rank (TFLOP/s) when > 1.
  int ranks = 1;
  // Means over the logging interval (--log-every > 1, at the steps that print a line; see
  // IntervalMeans): how many steps, the mean losses and step time, and the rates over the
  // interval (its tokens, FLOPs / its seconds). interval_steps 0: none.
  int64_t interval_steps = 0;
  double interval_loss = kNone;
  double interval_lm_loss = kNone;
  double interval_mtp_loss = kNone;
  double interval_step_time_s = kNone;
  double interval_tokens_per_s = kNone;
  double interval_tflops = kNone;
  double interval_mfu = kNone;
  // --log-expert-load, on its steps: the (token, expert) assignments each routed expert received
  // this step (all micro-batches, all ranks), one row per MoE layer, and each row's decoder
  // layer index (Hugging Face numbering: MTP layers follow the main ones). Empty otherwise.
  std::vector<int64_t> expert_load_layers;
  std::vector<std::vector<int64_t>> expert_load;
  // ... and each routed expert's e_score_correction_bias after the step's update (what a
  // checkpoint of this step holds), one row per MoE layer as expert_load. Empty otherwise.
  std::vector<std::vector<float>> expert_bias;
  // Every step: each MoE layer's sequence-wise balance loss (unweighted; the mean over the step's
  // sequences and ranks, adding up to balance_loss) and the layers' decoder indices (as
  // expert_load_layers). Empty when the model has no MoE layer.
  std::vector<int64_t> balance_loss_layers;
  std::vector<double> balance_loss_per_layer;
};

// max(load) / mean(load) of one layer (1 = balanced; NaN when the layer received nothing).
double expert_load_imbalance(const std::vector<int64_t>& load_E);
// expert_load_imbalance of each row of m.expert_load.
std::vector<double> expert_load_imbalances(const StepMetrics& m);

// --- The record's fields, described once -------------------------------------------------------

// A field's member, whose type says how it is written and read: a count; an int; a measurement
// (NaN: not measured, null in the JSONL); per MoE layer (arrays in the order of the group's
// layers, below): decoder indices, a value (NaN: null), per-expert counts, per-expert float32
// values (each written as its shortest decimal, "0.03"); or a per-layer value computed from other
// fields (written, not read back).
using DerivedPerLayer = std::vector<double> (*)(const StepMetrics&);
using MetricMember =
    std::variant<int64_t StepMetrics::*, int StepMetrics::*, double StepMetrics::*,
                 std::vector<int64_t> StepMetrics::*, std::vector<double> StepMetrics::*,
                 std::vector<std::vector<int64_t>> StepMetrics::*,
                 std::vector<std::vector<float>> StepMetrics::*, DerivedPerLayer>;

// When the JSONL line holds a field (inside a group that is written).
enum class Written {
  kAlways,      // every record
  kIfPositive,  // a count, when > 0
  kNullIfNone,  // a measurement: null when not measured (keys a reader can count on)
  kIfMeasured,  // a measurement: left out when not measured
  kIfAny,       // an array: left out when empty
  kNever,       // not in the JSONL (ranks: the progress line's labels)
};

// Fields written together, when the group's condition holds; a per-layer group's arrays follow
// its layers' decoder indices (balance_loss_layers, expert_load_layers).
enum class MetricGroup {
  kStep,             // every record
  kInterval,         // interval_steps > 0: a step that prints a line under --log-every > 1
  kBalancePerLayer,  // balance_loss_per_layer not empty: a model with MoE layers
  kExpertLoad,       // expert_load not empty: --log-expert-load steps
};

// Whose value it is under mpirun (docs/metrics.md's "under mpirun" column).
enum class MetricScope {
  kNoRank,        // "—": a count of steps
  kGlobal,        // the same on every rank, of the whole global batch
  kRank0,         // rank 0's own measurement
  kPerRank,       // divided by the number of ranks
  kAllRanks,      // every rank's together
  kRank0EpGroup,  // rank 0's expert-parallel group
};
const char* scope_name(MetricScope s);  // as docs/metrics.md writes it: "global", "rank 0", ...

struct MetricField {
  const char* key;  // the JSONL key (= the member's name)
  MetricMember member;
  Written written;
  MetricGroup group;
  const char* unit;  // docs/metrics.md's unit column ("—": none)
  MetricScope scope;
  // TensorBoard: a scalar's tag (the float32 of the JSONL value), or with a per-layer member a
  // tag ending in "_L" (L: the layer's decoder index), a scalar per layer or, for per-expert
  // rows, a histogram per layer (metrics/tensorboard.h). nullptr: not in TensorBoard.
  const char* tb_tag = nullptr;
};

namespace step_metric_table {
using enum Written;
using enum MetricGroup;
using enum MetricScope;
// A member and its JSONL key, its name.
#define MOET_FIELD(name) #name, &StepMetrics::name

// The JSONL line's keys in this order.
inline constexpr MetricField kStepMetricFields[] = {
    // member (key), when written, group, unit, under mpirun, TensorBoard tag
    {MOET_FIELD(step), kAlways, kStep, "—", kNoRank},
    {MOET_FIELD(total_steps), kIfPositive, kStep, "—", kNoRank},
    {MOET_FIELD(loss), kNullIfNone, kStep, "nats/token", kGlobal, "total loss"},
    {MOET_FIELD(lm_loss), kIfMeasured, kStep, "nats/token", kGlobal, "lm loss"},
    {MOET_FIELD(mtp_loss), kIfMeasured, kStep, "nats/token", kGlobal, "mtp loss"},
    {MOET_FIELD(balance_loss), kIfMeasured, kStep, "—", kGlobal, "load_balancing_loss"},
    {MOET_FIELD(z_loss), kIfMeasured, kStep, "—", kGlobal, "z_loss"},
    {MOET_FIELD(eval_loss), kIfMeasured, kStep, "nats/token", kGlobal, "lm loss validation"},
    {MOET_FIELD(eval_loss_se), kIfMeasured, kStep, "nats/token", kGlobal},
    {MOET_FIELD(lr), kNullIfNone, kStep, "—", kGlobal, "learning-rate"},
    {MOET_FIELD(grad_norm), kNullIfNone, kStep, "—", kGlobal, "grad-norm"},
    {MOET_FIELD(tokens_per_s), kNullIfNone, kStep, "tokens/s", kGlobal, "tokens-per-sec"},
    {MOET_FIELD(tflops), kNullIfNone, kStep, "10¹² FLOP/s", kPerRank, "throughput"},
    {MOET_FIELD(mfu), kNullIfNone, kStep, "fraction 0–1", kPerRank, "mfu"},
    {MOET_FIELD(max_expert_load), kNullIfNone, kStep, "ratio", kGlobal, "max-expert-load"},
    {MOET_FIELD(tokens), kAlways, kStep, "tokens", kGlobal, "consumed-tokens"},
    {MOET_FIELD(step_time_s), kIfMeasured, kStep, "s", kRank0, "iteration-time"},
    {MOET_FIELD(data_wait_s), kIfMeasured, kStep, "s", kRank0},
    {MOET_FIELD(a2a_s), kIfMeasured, kStep, "s", kRank0, "a2a-time"},
    {MOET_FIELD(exposed_comm_s), kIfMeasured, kStep, "s", kRank0, "exposed-comm-time"},
    {MOET_FIELD(a2a_exposed_s), kIfMeasured, kStep, "s", kRank0, "a2a-exposed-time"},
    {MOET_FIELD(grad_sync_s), kIfMeasured, kStep, "s", kRank0, "grad-sync-time"},
    {MOET_FIELD(comm_bytes), kIfMeasured, kStep, "bytes", kRank0, "comm-bytes"},
    {MOET_FIELD(grad_sync_bytes), kIfMeasured, kStep, "bytes", kRank0, "grad-sync-bytes"},
    {MOET_FIELD(comm_bytes_other_nodes), kIfMeasured, kStep, "bytes", kRank0},
    {MOET_FIELD(tp_comm_s), kIfMeasured, kStep, "s", kRank0, "tp-comm-time"},
    {MOET_FIELD(tp_bytes), kIfMeasured, kStep, "bytes", kRank0, "tp-bytes"},
    {MOET_FIELD(ep_load_imbalance), kIfMeasured, kStep, "ratio", kRank0EpGroup,
     "ep-load-imbalance"},
    {MOET_FIELD(elapsed_s), kIfMeasured, kStep, "s", kRank0},
    {MOET_FIELD(eta_s), kIfMeasured, kStep, "s", kRank0},
    {MOET_FIELD(peak_rss_mb), kIfMeasured, kStep, "MiB", kRank0, "mem-max-rss-mb"},
    {MOET_FIELD(save_s), kIfMeasured, kStep, "s", kRank0, "save-time"},
    {MOET_FIELD(pp_run_s), kIfMeasured, kStep, "s", kGlobal},
    {MOET_FIELD(pp_bubble), kIfMeasured, kStep, "ratio", kGlobal, "pp-bubble"},
    {MOET_FIELD(pp_bytes), kIfMeasured, kStep, "bytes", kAllRanks},
    {MOET_FIELD(pp_schedule_s), kIfMeasured, kStep, "s", kGlobal},
    {MOET_FIELD(pp_idle_s), kIfAny, kStep, "s", kGlobal},
    {MOET_FIELD(pp_idle_formula_s), kIfMeasured, kStep, "s", kGlobal},
    {MOET_FIELD(pp_forward_s), kIfMeasured, kStep, "s", kGlobal},
    {MOET_FIELD(pp_backward_s), kIfMeasured, kStep, "s", kGlobal},
    {MOET_FIELD(pp_weight_s), kIfMeasured, kStep, "s", kGlobal},
    {MOET_FIELD(ranks), kNever, kStep, "—", kNoRank},
    {MOET_FIELD(interval_steps), kAlways, kInterval, "steps", kNoRank},
    {MOET_FIELD(interval_loss), kIfMeasured, kInterval, "nats/token", kGlobal},
    {MOET_FIELD(interval_lm_loss), kIfMeasured, kInterval, "nats/token", kGlobal},
    {MOET_FIELD(interval_mtp_loss), kIfMeasured, kInterval, "nats/token", kGlobal},
    {MOET_FIELD(interval_step_time_s), kIfMeasured, kInterval, "s", kRank0},
    {MOET_FIELD(interval_tokens_per_s), kIfMeasured, kInterval, "tokens/s", kGlobal},
    {MOET_FIELD(interval_tflops), kIfMeasured, kInterval, "10¹² FLOP/s", kPerRank},
    {MOET_FIELD(interval_mfu), kIfMeasured, kInterval, "fraction 0–1", kPerRank},
    {MOET_FIELD(balance_loss_layers), kAlways, kBalancePerLayer, "—", kGlobal},
    {MOET_FIELD(balance_loss_per_layer), kAlways, kBalancePerLayer, "—", kGlobal,
     "moe/balance_loss_layer_L"},
    {MOET_FIELD(expert_load_layers), kAlways, kExpertLoad, "—", kGlobal},
    {MOET_FIELD(expert_load), kAlways, kExpertLoad, "tokens", kGlobal, "moe/expert_load_layer_L"},
    {"expert_load_imbalance", &expert_load_imbalances, kAlways, kExpertLoad, "ratio", kGlobal,
     "moe/expert_load_imbalance_layer_L"},
    {MOET_FIELD(expert_bias), kIfAny, kExpertLoad, "—", kGlobal, "moe/expert_bias_layer_L"},
};

#undef MOET_FIELD

}  // namespace step_metric_table

using step_metric_table::kStepMetricFields;

// Whether m's JSONL line holds the field (its group is written and its own rule holds).
bool metric_written(const StepMetrics& m, const MetricField& f);
// A per-layer field's layers: the decoder indices of its group's MoE layers (empty otherwise).
const std::vector<int64_t>& metric_layers(const StepMetrics& m, const MetricField& f);

// The JSON object of one step, one line without a newline: the written fields in the table's
// order.
std::string metrics_json_line(const StepMetrics& m);
// A record read back from such an object (the line's fields; the rest keep their defaults, and
// null is "not measured"). Computed fields (expert_load_imbalance) are not read.
StepMetrics step_metrics_from_json(const nlohmann::json& j);

}  // namespace moet
