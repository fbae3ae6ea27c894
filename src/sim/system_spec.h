// SystemSpec: one cluster kind from the catalog configs/systems/NAME.json: per-GPU peaks,
// memory, links, and the measured efficiencies the performance model uses (each with a source).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "kernels/number_format.h"

namespace moet::sim {

// The expert all-to-all within an NVLink domain as measured at each EP size (fractions of the
// NVLink bandwidth): the more ranks, the smaller each rank-to-rank message and the lower the
// throughput. `peers` ascending; the other columns one value per entry.
struct A2aByPeers {
  std::vector<double> peers;
  std::vector<double> dispatch_fp8, dispatch_bf16, combine;
};

// Efficiencies of one all-to-all at a given EP size.
struct A2aEfficiency {
  double dispatch_fp8 = 0, dispatch_bf16 = 0, combine = 0;
};

// How well real kernels and collectives use the peaks (fractions, 0..1), from published
// measurements (configs/systems/*.json say which) or from `moet bench` for `local`.
struct Efficiency {
  std::map<std::string, double> gemm_max;  // best GEMM throughput / peak, per precision
  // Per precision: a GEMM's efficiency falls along each dimension x as x/(x + d).
  std::map<std::string, double> gemm_half_dim;
  // `local` only: the half dimension measured with one thread. A rank of a shared machine that
  // runs one thread (as many ranks as SystemSpec::threads or more) takes it: small GEMMs lose
  // less to one thread than to a team of threads splitting them.
  std::map<std::string, double> gemm_half_dim_one_thread;
  double attention_fwd = 0.5;  // causal flash attention forward, of the BF16 (fp32) peak
  double attention_bwd = 0.4;  // its backward
  double hbm = 0.85;           // memory-bound kernels, of the HBM bandwidth
  double a2a_nvlink = 0.5;     // expert dispatch/combine, of the NVLink bandwidth
  // Measured per EP size (`a2a_nvlink_by_peers`); empty: a2a_nvlink at every size.
  A2aByPeers a2a_nvlink_by_peers;
  double a2a_scaleout = 0.8;         // expert dispatch/combine across domains, of the NIC bandwidth
  double a2a_sm_fraction = 0;        // compute slowed by this fraction while an all-to-all runs
  double collective_nvlink = 0.8;    // reduce-scatter / all-gather bus bandwidth, of NVLink
  double collective_scaleout = 0.9;  // ... of the NIC
  double collective_sm_fraction = 0;  // compute slowed by this while a DP collective runs
  double op_overhead_us = 0;          // fixed cost per kernel (launch, OpenMP fork/join)
  // Host time to launch one kernel outside a CUDA graph (GPUs; 0 on CPUs, where op_overhead_us
  // is the per-kernel cost). Counts only for kernels that --cuda-graphs leaves uncaptured, and
  // only where the host falls behind the GPU (cost_model.cpp).
  double kernel_launch_us = 0;
  // Host time of the training framework (PyTorch/Megatron dispatch, Python, the ops the model
  // does not count) per kernel the model counts outside CUDA graphs, on top of kernel_launch_us.
  // The one constant fitted to published throughput (moet published --fit; leave-one-out in
  // docs/simulator.md's validation table).
  double framework_host_us = 0;
};

struct SystemSpec {
  std::string name;
  std::string description;
  // Dense, per GEMM operand format, keyed by its name (ops::format_name, which names the recipe
  // that runs its GEMMs in it: fp32, bf16, mxfp8, fp8-blockwise; precision_name).
  std::map<std::string, double> peak_tflops;
  double hbm_gb = 0;         // memory per GPU
  double hbm_tbps = 0;       // its bandwidth, TB/s
  double nvlink_gbps = 0;    // NVLink (or shared-memory) bandwidth per GPU, each direction, GB/s
  int nvlink_domain = 1;     // GPUs that share one NVLink domain
  double scaleout_gbps = 0;  // scale-out NIC bandwidth per GPU, each direction, GB/s
  // Every rank of a run shares one machine's compute and memory (`local`: MPI ranks on a CPU,
  // in one shared-memory domain or in the emulated cluster's namespaces).
  bool compute_shared = false;
  int threads = 0;  // compute_shared: the threads the calibration ran (the machine's cores)
  double memory_reserve_gb = 0;  // runtime, communication buffers, allocator fragmentation
  Efficiency eff;
  std::map<std::string, std::string> sources;  // field -> where its value comes from

  // Peak for GEMMs in a format; throws a one-line moet::Error if the system has none.
  double peak(ops::Format f) const;
  double gemm_max(ops::Format f) const;
  double gemm_half_dim(ops::Format f) const;
  // The half dimension a rank of an N-rank run sees: gemm_half_dim, or on a shared machine whose
  // ranks run one thread each (N >= threads), the one-thread curve's where it was measured.
  double gemm_half_dim(ops::Format f, int ranks) const;
  // GPUs of an N-GPU job that share a domain: the largest divisor of N within the domain.
  int ranks_per_domain(int gpus) const;
  // The NVLink all-to-all among `peers` ranks of a domain: interpolated in log2(peers) between
  // measured sizes; past the largest, the measured range's mean slope carries on (never below
  // half the last measurement); below the smallest, the smallest's.
  A2aEfficiency a2a_nvlink_at(double peers) const;
};

// The simulator names precisions as the trainer names its recipes (model/recipe.h
// recipe_name: fp32, bf16, mxfp8, fp8-blockwise). "fp8", its name for fp8-blockwise before, is
// still read, in system files and as --precision of moet simulate and moet plan: this returns
// "fp8-blockwise" for it and any other name as it is.
std::string precision_name(const std::string& name);

// Directory of the catalog: $MOET_SYSTEMS_DIR, else configs/systems of the source tree.
std::string systems_dir();
// A name from the catalog (e.g. "gb300-nvl72") or a path to a .json file.
SystemSpec load_system(const std::string& name_or_path);
SystemSpec parse_system(const std::string& json_text, const std::string& source_name);
std::string system_to_json(const SystemSpec& s);

}  // namespace moet::sim
