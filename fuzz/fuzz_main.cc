// libFuzzer's entry point for one target, chosen at compile time by MOTLEY_FUZZ_TARGET (its
// function in fuzz_targets.h).
#include "fuzz_targets.h"

#ifndef MOTLEY_FUZZ_TARGET
#error "compile with -DMOTLEY_FUZZ_TARGET=<name>_target"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return motley::fuzz::MOTLEY_FUZZ_TARGET(data, size);
}
