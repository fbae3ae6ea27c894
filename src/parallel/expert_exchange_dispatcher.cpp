#include "parallel/expert_exchange_dispatcher.h"

#include <algorithm>

#include "core/error.h"
#include "core/trace.h"
#include "kernels/ops.h"

namespace moet {

ExpertExchangeDispatcher::ExpertExchangeDispatcher(Communicator& ep_group, int64_t n_experts)
    : comm_(ep_group), E_(n_experts), P_(ep_group.size()) {
  MOET_CHECK(E_ % P_ == 0, "n_routed_experts (", E_,
             ") must be divisible by the expert-parallel size (", P_, ")");
  local_ = E_ / P_;
  first_ = int64_t(comm_.rank()) * local_;
  ranks_per_node_ = P_;
  send_counts_.assign(E_, 0);
  cursor_.assign(E_ + 1, 0);
  send_rows_.assign(P_, 0);
  recv_rows_.assign(P_, 0);
  send_bytes_.assign(P_, 0);
  send_off_.assign(P_, 0);
  recv_bytes_.assign(P_, 0);
  recv_off_.assign(P_, 0);
}

void ExpertExchangeDispatcher::set_ranks_per_node(int64_t r) {
  MOET_CHECK(r >= 1 && P_ % r == 0, "--ep-ranks-per-node ", r,
             " must divide the expert-parallel size ", P_);
  ranks_per_node_ = r;
}

void ExpertExchangeDispatcher::plan_common(Workspace& ws, int64_t D, int64_t K) {
  N_ = ws.N();
  D_ = D;
  K_ = K;
  A_ = N_ * K;
  const int64_t max_rows = A_ * P_;  // at most every assignment of the group lands here
  Arena& a = ws.act;
  slot_NK_ = a.alloc_i32({N_, K});
  offsets_G1_ = a.alloc_i32({local_ * P_ + 1});
  xp_from_recv_M_ = a.alloc_i32({max_rows});
  recv_from_xp_M_ = a.alloc_i32({max_rows});
  xp_MD_ = a.alloc_f32({max_rows, D});
  returned_AD_ = a.alloc_f32({A_, D});
  send_AD_ = ws.scratch.alloc_f32({A_, D});
  recv_MD_ = ws.scratch.alloc_f32({max_rows, D});
  // (an FP4 dispatch sends bf16 rows where it quantizes them on arrival)
  const int64_t wire =
      std::max({row_bytes(dispatch_format_), row_bytes(combine_format_),
                ops::is_fp4(dispatch_format_) ? row_bytes(ops::Format::BF16) : int64_t(0)});
  amax_G_ = ops::is_fp4(dispatch_format_) ? a.alloc_f32({local_ * P_}) : Tensor{};
  if (dispatch_format_ != ops::Format::F32 || combine_format_ != ops::Format::F32) {
    wire_send_ = ws.scratch.alloc(DType::U8, {A_ * wire});
    wire_recv_ = ws.scratch.alloc(DType::U8, {max_rows * wire});
  }
}

void ExpertExchangeDispatcher::sort_sources(const Tensor& idx_NK, int32_t* token_of_row) {
  const int32_t* idx = idx_NK.i32();
  std::fill(send_counts_.begin(), send_counts_.end(), 0);
  for (int64_t a = 0; a < A_; ++a) {
    MOET_ASSERT(idx[a] >= 0 && idx[a] < E_);
    ++send_counts_[idx[a]];  // key = destination * local + local expert = the global expert id
  }
  cursor_[0] = 0;
  for (int64_t e = 0; e < E_; ++e) cursor_[e + 1] = cursor_[e] + send_counts_[e];
  int32_t* slot = slot_NK_.i32();
  for (int64_t a = 0; a < A_; ++a) {
    const int64_t pos = cursor_[idx[a]]++;
    slot[a] = int32_t(pos);
    if (token_of_row) token_of_row[pos] = int32_t(a / K_);
  }
  // nodes reached per token (node-limited routing)
  max_nodes_per_token_ = 0;
  const int64_t experts_per_node = local_ * ranks_per_node_;
  for (int64_t n = 0; n < N_; ++n) {
    int64_t nodes = 0;
    for (int64_t k = 0; k < K_; ++k) {
      bool seen = false;
      for (int64_t j = 0; j < k; ++j)
        seen |= idx[n * K_ + j] / experts_per_node == idx[n * K_ + k] / experts_per_node;
      nodes += !seen;
    }
    max_nodes_per_token_ = std::max(max_nodes_per_token_, nodes);
  }
}

void ExpertExchangeDispatcher::exchange(const void* rows_in, void* rows_out, bool forward,
                                        int64_t row_bytes) {
  int64_t so_ = 0, ro_ = 0;
  for (int64_t p = 0; p < P_; ++p) {
    send_bytes_[p] = send_rows_[p] * row_bytes;
    recv_bytes_[p] = recv_rows_[p] * row_bytes;
    send_off_[p] = so_;
    recv_off_[p] = ro_;
    so_ += send_bytes_[p];
    ro_ += recv_bytes_[p];
  }
  const std::vector<int64_t>& sb = forward ? send_bytes_ : recv_bytes_;
  const std::vector<int64_t>& so = forward ? send_off_ : recv_off_;
  const std::vector<int64_t>& rb = forward ? recv_bytes_ : send_bytes_;
  const std::vector<int64_t>& ro = forward ? recv_off_ : send_off_;
  comm_.alltoallv(rows_in, sb.data(), so.data(), rows_out, rb.data(), ro.data());
  const int64_t me = comm_.rank();
  for (int64_t p = 0; p < P_; ++p) {
    if (p == me) continue;
    bytes_sent_ += sb[p];
    if (p / ranks_per_node_ != me / ranks_per_node_) bytes_sent_other_nodes_ += sb[p];
  }
}

int64_t ExpertExchangeDispatcher::exchange_bytes(bool forward, int64_t row_bytes) const {
  int64_t rows = 0;
  for (int64_t p = 0; p < P_; ++p)
    if (p != comm_.rank()) rows += forward ? send_rows_[p] : recv_rows_[p];
  return rows * row_bytes;
}

std::pair<double, double> ExpertExchangeDispatcher::rows_received_max_mean() {
  rows_of_rank_.resize(size_t(P_));  // allocates on the first call only
  const int64_t mine = rows_received_;
  xch_.run_now([&] { comm_.allgather(&mine, sizeof mine, rows_of_rank_.data()); }, "expert load",
               trace::kMetrics, int64_t(sizeof mine));
  double max = 0, sum = 0;
  for (int64_t r : rows_of_rank_) max = std::max(max, double(r)), sum += double(r);
  return {max, sum / double(P_)};
}

void ExpertExchangeDispatcher::dispatch(const Tensor& x_ND, const Tensor& idx_NK) {
  dispatch_start(x_ND, idx_NK);
  dispatch_finish();
}

void ExpertExchangeDispatcher::combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND,
                                       bool accumulate) {
  combine_start(yp_MD);
  combine_finish(gates_NK, y_ND, accumulate);
}

void ExpertExchangeDispatcher::combine_backward(const Tensor& dy_ND, const Tensor& yp_MD,
                                                const Tensor& gates_NK, Tensor& dyp_MD,
                                                Tensor& dgates_NK) {
  combine_backward_start(dy_ND, yp_MD, gates_NK, dgates_NK);
  combine_backward_finish(dyp_MD);
}

void ExpertExchangeDispatcher::dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) {
  dispatch_backward_start(dxp_MD);
  dispatch_backward_finish(dx_ND);
}

void ExpertExchangeDispatcher::combine_start(const Tensor& yp_MD) {
  Tensor back = recv_MD_.rows(0, M_);
  ops::gather_rows(yp_MD, xp_from_recv_M_.rows(0, M_), back);  // expert order → receive order
  const ops::Format f = combine_format_;
  const int64_t bytes = exchange_bytes(false, row_bytes(f));
  if (f == ops::Format::F32) {
    xch_.issue(
        [this, back] { exchange(back.ptr, returned_AD_.ptr, false, row_bytes(ops::Format::F32)); },
        "expert outputs to sources", trace::kCombine, bytes);
    return;
  }
  ops::encode_rows(back, f, wire_recv_.ptr);
  xch_.issue([this, f] { exchange(wire_recv_.ptr, wire_send_.ptr, false, row_bytes(f)); },
             "expert outputs to sources", trace::kCombine, bytes);
}

void ExpertExchangeDispatcher::combine_finish(const Tensor& gates_NK, Tensor& y_ND,
                                              bool accumulate) {
  xch_.complete();
  if (combine_format_ != ops::Format::F32)
    ops::decode_rows(wire_send_.ptr, combine_format_, returned_AD_);
  ops::unpermute_forward(returned_AD_, slot_NK_, gates_NK, y_ND, accumulate);
}

void ExpertExchangeDispatcher::combine_backward_start(const Tensor& dy_ND, const Tensor&,
                                                      const Tensor& gates_NK, Tensor& dgates_NK) {
  ops::unpermute_backward(dy_ND, returned_AD_, slot_NK_, gates_NK, send_AD_, dgates_NK);
  xch_.issue([this] { exchange(send_AD_.ptr, recv_MD_.ptr, true, row_bytes(ops::Format::F32)); },
             "output gradients to experts", trace::kCombine,
             exchange_bytes(true, row_bytes(ops::Format::F32)));
}

void ExpertExchangeDispatcher::combine_backward_finish(Tensor& dyp_MD) {
  xch_.complete();
  ops::gather_rows(recv_MD_.rows(0, M_), recv_from_xp_M_.rows(0, M_), dyp_MD);
}

void ExpertExchangeDispatcher::dispatch_backward_start(const Tensor& dxp_MD) {
  Tensor back = recv_MD_.rows(0, M_);
  ops::gather_rows(dxp_MD, xp_from_recv_M_.rows(0, M_), back);
  xch_.issue([this, back] { exchange(back.ptr, send_AD_.ptr, false, row_bytes(ops::Format::F32)); },
             "input gradients to sources", trace::kDispatch,
             exchange_bytes(false, row_bytes(ops::Format::F32)));
}

void ExpertExchangeDispatcher::dispatch_backward_finish(Tensor& dx_ND) {
  xch_.complete();
  ops::gather_rows_backward(send_AD_, slot_NK_, dx_ND);
}

}  // namespace moet
