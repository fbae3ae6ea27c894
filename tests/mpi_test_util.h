// Shared by the tests that run under mpirun (tests/mpi_*.cpp): the world communicator that
// mpi_main.cpp made.
#pragma once
#include "parallel/mpi_communicator.h"

namespace moet::test {

MpiCommunicator& world();

}  // namespace moet::test
