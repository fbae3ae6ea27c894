// Under mpirun, a refused `moet train` ends cleanly: every rank checks the same flags, config
// and data before the first collective of training, then the ranks agree (one allreduce)
// whether all of them succeeded. When one failed, the lowest failing rank prints its one-line
// error, the others stay silent, and all of them finalize MPI and exit non-zero: no MPI_Abort
// banner, no hang when only one rank saw the problem (a file only rank 0 opens). Failures after
// the agreement still take the job down at once (Communicator::abort).
#pragma once

namespace moet {

class Communicator;

class SetupAgreement {
 public:
  // world: null (one process) or the job's processes.
  explicit SetupAgreement(Communicator* world);

  // This rank's setup succeeded: returns once every rank's did; throws moet::Error when another
  // rank's failed (that rank reports it).
  void agree();
  // This rank's setup failed (an exception before agree()): tells the other ranks, which wait in
  // agree() or here.
  void refuse();

  // Neither agree() nor refuse() has run: an error now is a setup error.
  bool pending() const { return !done_; }
  // The ranks agreed that the setup failed: every rank may exit without MPI_Abort.
  bool refused() const { return refused_; }
  // This rank prints the error: the lowest rank whose setup failed.
  bool reports() const { return reports_; }

 private:
  void exchange(bool failed);
  Communicator* world_;
  bool done_ = false, refused_ = false, reports_ = false;
};

}  // namespace moet
