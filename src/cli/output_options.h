// The files a command writes, as its options name them, checked before the command does any
// work (core/output_files.h): a missing directory, a directory given for a file or two options
// naming one file is bad input, found before anything is computed or written. Free functions;
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include "motley/core/status.h"

namespace motley::cli {

struct OutputOption {
  std::string option;  // as the user typed it: "--svg"
  std::string path;    // its value; "" when not given
};

// Checks each given path with check_output_file and that no two of them name the same file.
// Errors: invalid_argument naming the option and the path.
Status check_output_options(const std::vector<OutputOption>& outputs);

}  // namespace motley::cli
