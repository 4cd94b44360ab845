// motley-run: the executable behind `motley run` (the only one that links libtorch). motley
// forwards `motley run ARGS` here as `motley-run run ARGS`.
#include "cli_main.h"

int main(int argc, char** argv) {
  return motley::cli::cli_main(argc, argv, {motley::cli::add_run_command});
}
