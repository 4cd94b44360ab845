# shellcheck shell=bash
# Sourced by scripts/slurm-check.sh and scripts/docker-check.sh: compares the losses a run of a
# plan printed with those `motley launch --nproc 2` prints for the same plan on this machine.
# Needs MOTLEY (the motley binary).

# "step N loss X" of every rank, one line per step.
losses() { sed -n 's/.*step *\([0-9]*\) *loss \([0-9.]*\).*/\1 \2/p' | sort -u; }

# expect_launch_losses WHAT PLAN STEPS OUTPUT: OUTPUT (a file of a run's output) holds the losses
# of `motley launch --nproc 2 -- run --plan PLAN --steps STEPS`; else says how they differ and
# exits 1.
expect_launch_losses() {
  local what=$1 plan=$2 steps=$3 output=$4 got want
  got=$(losses <"$output")
  want=$("$MOTLEY" launch --nproc 2 -- run --plan "$plan" --steps "$steps" 2>&1 | losses)
  if [[ -n $got && $got == "$want" ]]; then
    echo "$what: the losses equal motley launch's on the same plan:"
    echo "$got"
  else
    echo "$what: the losses differ from motley launch's on the same plan:" >&2
    diff <(echo "$got") <(echo "$want") >&2 || true
    exit 1
  fi
}
