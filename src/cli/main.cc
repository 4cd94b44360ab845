// The motley command line. `motley run` trains with libtorch, whose loading alone costs about
// half a second, so it lives in the sibling executable motley-run (run_main.cc) and this one
// forwards to it: every other command starts in milliseconds.
#include "cli_main.h"
#include "profile_commands.h"

int main(int argc, char** argv) {
  using namespace motley::cli;
  return cli_main(
      argc, argv,
      {add_model_command, add_cluster_command, add_estimate_command, add_plan_command,
       add_compare_command, add_replan_command, add_export_command, add_detect_command,
       add_simulate_command, add_report_command, add_calibrate_command, add_fidelity_command,
       add_run_forwarder, add_launch_command, add_profile_forwarder, add_stress_forwarder});
}
