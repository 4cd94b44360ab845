// A checkpoint's layer file (the binary tensor records), as `run --resume` reads it. The
// checksum makes almost every mutation a checksum error, so the target fixes the checksum of
// the input first: the records behind it are what is fuzzed. An accepted file re-encodes to
// exactly its own bytes.
#include <cstring>
#include <string>

#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/core/hash.h"
#include "motley/exec/checkpoint_format.h"

namespace motley::fuzz {

int tensor_file_target(const uint8_t* data, size_t size) {
  std::string bytes(text(data, size));
  if (bytes.size() >= sizeof(uint64_t)) {
    const uint64_t sum = fnv1a_64(std::string_view(bytes).substr(0, bytes.size() - sizeof(sum)));
    std::memcpy(bytes.data() + bytes.size() - sizeof(sum), &sum, sizeof(sum));
  }
  Result<TensorFileRecords> file = decode_tensor_file(bytes, kSource);
  if (!file) {
    check_refusal(file.status());
    return 0;
  }
  if (encode_tensor_file(file->step, file->records) != bytes) {
    fail("an accepted tensor file must re-encode to its own bytes", "");
  }
  return 0;
}

}  // namespace motley::fuzz
