// motley-profile: the executable behind `motley profile` (it links libtorch, as motley-run does,
// so that no other command pays for loading it). motley forwards `motley profile ARGS` here as
// `motley-profile profile ARGS`.
#include "cli_main.h"
#include "motley/exec/host_memory.h"
#include "profile_commands.h"

int main(int argc, char** argv) {
  // As motley-run does, so that layers are timed with the allocator they train with.
  motley::keep_freed_host_buffers();
  return motley::cli::cli_main(argc, argv,
                               {motley::cli::add_profile_command, motley::cli::add_stress_command});
}
