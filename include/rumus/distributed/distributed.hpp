#pragma once
// Everything distributed: process groups (threads, MPI, or NCCL on GPUs), FSDP (with sharded clipping and loss scaling) and DDP.
#include "rumus/distributed/ddp.hpp"
#include "rumus/distributed/fsdp.hpp"
#include "rumus/distributed/functional.hpp"
#include "rumus/distributed/mpi_group.hpp"
#include "rumus/distributed/nccl_group.hpp"
#include "rumus/distributed/process_group.hpp"
#include "rumus/distributed/sharded_checkpoint.hpp"
#include "rumus/distributed/sharded_optim.hpp"
#include "rumus/distributed/thread_group.hpp"
