// The training state a checkpoint holds, as pieces of global tensors: parameter values
// ("param/NAME") and both AdamW moments ("adam_m/NAME", "adam_v/NAME"), NAME being the
// ParamStore's weight name and the global tensor the unsharded weight (every expert). A piece
// is a run of elements [begin, begin + n) of a global tensor in row-major order, backed by
// this process's memory, in fp32 or (AdamW moments stored in bf16) bf16.
//
// Which process provides which piece (save): dense weights and their moments from world rank 0,
// expert shards from the first rank of each expert-data-parallel group (ranks 0..ep-1), and
// under ZeRO-1 each rank's own range of the moments; so every element of the job's state is
// written exactly once. What a process needs (load) is everything it holds, whatever layout
// wrote the checkpoint: the pieces are cut and pasted by global element range.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moet {

class ParamStore;
class AdamW;
class Zero1;

struct StatePiece {
  std::string tensor;          // "param/NAME", "adam_m/NAME" or "adam_v/NAME"
  std::vector<int64_t> shape;  // of the global tensor
  int64_t begin = 0;           // first element of the piece in the global tensor
  int64_t n = 0;
  float* data = nullptr;     // this process's memory, n floats (an fp32 piece)
  uint16_t* bf16 = nullptr;  // or n bf16 values (a bf16 piece: data is null)
  bool is_bf16() const { return bf16 != nullptr; }
  size_t element_size() const { return is_bf16() ? 2 : 4; }
  size_t bytes() const { return size_t(n) * element_size(); }
  void* raw() const { return is_bf16() ? static_cast<void*>(bf16) : static_cast<void*>(data); }
};

struct StateHolder {
  ParamStore* params = nullptr;
  AdamW* adamw = nullptr;  // null or without moments: moments are not part of the state
  Zero1* zero1 = nullptr;  // ZeRO-1's shard of the moments (then adamw has none)
  int world_rank = 0;
  int edp_rank = 0;  // rank in the expert-data-parallel group
  int ep = 1;        // experts are sharded over ep ranks
  // Under pipeline parallelism world_rank is the rank in the stage's data-parallel group (the
  // stage's rank 0 saves its dense weights) and params holds that stage's weights only.
  bool pipeline_stage = false;
  // Under tensor parallelism world_rank is the rank among the ranks of this part (the data-
  // parallel group), and rank 0 of each part saves its part of the split weights; the
  // replicated weights are saved by part 0's.
  int tp_part = 0;
};

// owned_only: the pieces this process writes; otherwise every piece it holds (to load).
std::vector<StatePiece> training_state_pieces(const StateHolder& h, bool owned_only);

}  // namespace moet
