// A command's output files, all of them or none: each path checked before any work is done,
// each file written to a temporary beside its target, and every one renamed into place only
// once all were written. Also recognises those temporaries, so that a directory can be rid of
// the ones a killed writer left. Knows nothing of what the files hold. OutputFiles is
// thread-compatible; the free functions are thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/status.h"

namespace motley {

// Checks, before any work, that a file can be written at `path`: the directory it names
// exists and may be written into, and `path` is not a directory or another non-regular file.
// `option` names the path in the message: "--svg: missing/x.svg: no such directory 'missing'".
// Errors: invalid_argument.
Status check_output_file(std::string_view option, const std::string& path);

// Checks, before any work, that files can be written into directory `path`, which is created
// if missing: it is a directory that may be written into, or it does not exist and the nearest
// directory above it that does may be written into. Errors: invalid_argument naming `option`.
Status check_output_directory(std::string_view option, const std::string& path);

// The file a temporary of OutputFiles stands in for, given the temporary's name without its
// directory (".plan.json.tmp.Ab12Cd" -> "plan.json"); nullopt for any other name. The same
// naming as write_file_atomically's (core/json.h), so its temporaries are recognised too.
std::optional<std::string> temporary_target(std::string_view file_name);

// Makes the entries created, renamed or removed in directory `dir` durable (fsync of the
// directory); a directory that cannot be opened is left as it is.
void sync_directory(const std::string& dir);

class OutputFiles {
 public:
  // Queues `contents` for `path`; nothing is written before commit().
  void add(std::string path, std::string contents);
  // Queues directory `path`, created with its missing parents by commit() before any file.
  void add_directory(std::string path);

  // Creates the directories, writes each file to a temporary in its target's directory
  // (flushed to disk), then renames each over its target, in the order added, and empties the
  // queue. On an error every temporary is removed, and so is every directory commit() created
  // that is still empty; no target has changed unless a rename itself failed, when those
  // renamed before it stay. Errors: io_error naming the file and the operating system's reason.
  Status commit();

 private:
  struct File {
    std::string path;
    std::string contents;
  };
  Status create_directories(std::vector<std::string>* created) const;
  Status write_temporaries(std::vector<std::string>* temporaries) const;
  Status rename_into_place(std::vector<std::string>* temporaries) const;

  std::vector<File> files_;
  std::vector<std::string> directories_;
};

}  // namespace motley
