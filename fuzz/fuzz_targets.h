// The fuzz targets, one per input format motley reads: each takes the bytes of one input,
// parses it as the commands do, and aborts when a check of fuzz_support.h fails. Each becomes
// a libFuzzer program (fuzz_main.cc, in a MOTLEY_FUZZ build), and all of them are replayed on
// their kept corpus by fuzz_replay in every build with tests (replay_main.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace motley::fuzz {

int hf_config_target(const uint8_t* data, size_t size);
int model_json_target(const uint8_t* data, size_t size);
int profile_target(const uint8_t* data, size_t size);
int cluster_yaml_target(const uint8_t* data, size_t size);
int plan_target(const uint8_t* data, size_t size);
int links_target(const uint8_t* data, size_t size);
int calibration_target(const uint8_t* data, size_t size);
int checkpoint_manifest_target(const uint8_t* data, size_t size);
int tensor_file_target(const uint8_t* data, size_t size);
int torch_pp_csv_target(const uint8_t* data, size_t size);

struct Target {
  std::string_view name;
  int (*run)(const uint8_t* data, size_t size);
};

inline constexpr Target kTargets[] = {
    {"hf_config", hf_config_target},
    {"model_json", model_json_target},
    {"profile", profile_target},
    {"cluster_yaml", cluster_yaml_target},
    {"plan", plan_target},
    {"links", links_target},
    {"calibration", calibration_target},
    {"checkpoint_manifest", checkpoint_manifest_target},
    {"tensor_file", tensor_file_target},
    {"torch_pp_csv", torch_pp_csv_target},
};

}  // namespace motley::fuzz
