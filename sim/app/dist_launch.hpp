#pragma once
// Joins the MPI job when an MPI launcher started this process: loads libfp8sim_mpi.so (beside the
// binary or in its lib/) and installs its communicator (sim/common/dist.hpp). A plain run stays
// one process and loads nothing.
namespace fp8sim::dist_launch {

// True when the environment says an MPI launcher started this process (Open MPI's mpirun, a PMI
// or PMIx launcher such as srun --mpi=pmix or MPICH's mpiexec).
bool under_launcher();
// This process's rank and the job's size as the launcher's environment states them, without MPI
// (0 and 1 when it does not say).
int launcher_rank();
int launcher_size();
// Installs the MPI communicator when under_launcher(); throws UsageError when the module or its
// MPI library cannot be loaded.
void start();

}  // namespace fp8sim::dist_launch
