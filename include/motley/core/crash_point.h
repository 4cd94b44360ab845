// Crash points: the places where a writer of durable state (OutputFiles, the checkpoint
// directory) has finished one operation on the file system and is about to start the next. A
// process killed at any of them must leave its outputs usable: the old version or the new one,
// never a mix, and leftovers the next writer recognises. Production code only marks the points;
// a test installs a hook that counts them and kills the process at each in turn (the kill
// matrix of exec/checkpoint_store_test.cc, motley run's MOTLEY_TEST_FAULT=save:N). Free
// functions; thread-safe.
#pragma once

#include <string_view>

namespace motley {

// Called at every crash point with what was just done ("renamed /d/latest"). May not return.
using CrashPointHook = void (*)(std::string_view done);

// Installs `hook` for every thread of the process (nullptr: none, the default).
void set_crash_point_hook(CrashPointHook hook);

// Marks a crash point: calls the installed hook, if any.
void crash_point(std::string_view done);

}  // namespace motley
