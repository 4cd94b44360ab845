// motley-run: the executable behind `motley run` (the only one that links libtorch). motley
// forwards `motley run ARGS` here as `motley-run run ARGS`.
#include "cli_main.h"
#include "motley/exec/host_memory.h"

int main(int argc, char** argv) {
  // Before libtorch starts its threads: activations freed and allocated again at every pass stay
  // in the heap instead of costing page faults (host_memory.h).
  motley::keep_freed_host_buffers();
  return motley::cli::cli_main(argc, argv, {motley::cli::add_run_command});
}
