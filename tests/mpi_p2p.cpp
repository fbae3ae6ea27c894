// Point-to-point messages (Communicator::isend / irecv / wait), the pipeline stages' transport,
// under mpirun (np 2 and 4): a ring of messages in flight at once, waited out of order and
// matched by tag; no allocation once the handles exist; a message of the wrong length is one
// moet::Error line on the receiver naming the peer, tag and both lengths — never a hang.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "error_of.h"
#include "mpi_test_util.h"

namespace moet {
namespace {

using test::error_of;

using test::world;

TEST(PointToPoint, RingOfTaggedMessagesWaitedOutOfOrder) {
  Communicator& w = world();
  const int P = w.size(), r = w.rank(), next = (r + 1) % P, prev = (r + P - 1) % P;
  constexpr int kMessages = 6;
  constexpr int64_t kLen = 1000;
  std::vector<std::vector<float>> out(kMessages, std::vector<float>(kLen)),
      in(kMessages, std::vector<float>(kLen, -1));
  std::vector<Communicator::Message> sends, recvs;
  // receives posted in reverse tag order, sends in order: matching is by tag, not arrival
  for (int t = kMessages - 1; t >= 0; --t)
    recvs.push_back(w.irecv(in[size_t(t)].data(), kLen * 4, prev, t));
  for (int t = 0; t < kMessages; ++t) {
    for (int64_t i = 0; i < kLen; ++i) out[size_t(t)][size_t(i)] = float(r * 100000 + t * 1000 + i);
    sends.push_back(w.isend(out[size_t(t)].data(), kLen * 4, next, t));
  }
  for (auto m : recvs) w.wait(m);
  for (auto m : sends) w.wait(m);
  for (int t = 0; t < kMessages; ++t)
    for (int64_t i = 0; i < kLen; i += 97)
      ASSERT_EQ(in[size_t(t)][size_t(i)], float(prev * 100000 + t * 1000 + i)) << t << " " << i;
  // The handles are reused: the same traffic again takes no new slots (no allocation).
  std::vector<Communicator::Message> again;
  for (int t = 0; t < kMessages; ++t)
    again.push_back(w.irecv(in[size_t(t)].data(), kLen * 4, prev, t));
  for (int t = 0; t < kMessages; ++t)
    again.push_back(w.isend(out[size_t(t)].data(), kLen * 4, next, t));
  for (auto m : again) {
    EXPECT_LT(m, 2 * kMessages);
    w.wait(m);
  }
  w.barrier();
}

TEST(PointToPoint, WrongLengthIsOneLineNotAHang) {
  Communicator& w = world();
  if (w.rank() > 1) {
    w.barrier();
    return;
  }
  std::vector<char> buf(64, 0);
  const int peer = 1 - w.rank();
  if (w.rank() == 1) {
    w.wait(w.isend(buf.data(), 48, peer, 7));  // longer than expected
    w.wait(w.isend(buf.data(), 8, peer, 8));   // shorter than expected
  } else {
    const std::string longer = error_of([&] { w.wait(w.irecv(buf.data(), 16, peer, 7)); });
    EXPECT_NE(longer.find("from rank 1 (tag 7) is longer than the 16 bytes expected"),
              std::string::npos)
        << longer;
    const std::string shorter = error_of([&] { w.wait(w.irecv(buf.data(), 16, peer, 8)); });
    EXPECT_NE(shorter.find("from rank 1 (tag 8) holds 8 bytes, not the 16 expected"),
              std::string::npos)
        << shorter;
    EXPECT_EQ(shorter.find('\n'), std::string::npos);
  }
  EXPECT_NE(error_of([&] { w.isend(buf.data(), 8, w.size(), 0); }).find("not a rank"),
            std::string::npos);
  // a rank may message itself (the V pipeline schedules' turn between a rank's two chunks): a
  // large message, the receive posted after the send
  std::vector<char> out(1 << 20), in(1 << 20);
  for (size_t i = 0; i < out.size(); ++i) out[i] = char(i * 7 + w.rank());
  const Communicator::Message s = w.isend(out.data(), int64_t(out.size()), w.rank(), 9);
  const Communicator::Message r = w.irecv(in.data(), int64_t(in.size()), w.rank(), 9);
  w.wait(r);
  w.wait(s);
  EXPECT_EQ(in, out);
  w.barrier();
}

}  // namespace
}  // namespace moet
