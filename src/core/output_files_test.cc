#include "motley/core/output_files.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace motley {
namespace {

namespace fs = std::filesystem;

// A fresh directory for one test, removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / (std::string("motley-") + info->test_suite_name() + "-" +
                                         info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string contents_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The names in `dir`, sorted.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(OutputFiles, CommitWritesEveryFileAndLeavesNoTemporary) {
  TempDir dir;
  std::ofstream(dir.file("old.json")) << "old\n";
  OutputFiles out;
  out.add(dir.file("old.json"), "new\n");
  out.add(dir.file("t.svg"), "<svg/>\n");
  ASSERT_TRUE(out.commit().is_ok());
  EXPECT_EQ(contents_of(dir.file("old.json")), "new\n");
  EXPECT_EQ(contents_of(dir.file("t.svg")), "<svg/>\n");
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"old.json", "t.svg"}));
}

TEST(OutputFiles, AFailedFileLeavesTheOthersAsTheyWere) {
  TempDir dir;
  std::ofstream(dir.file("plan.json")) << "old\n";
  OutputFiles out;
  out.add(dir.file("plan.json"), "new\n");
  out.add(dir.file("missing/x.svg"), "<svg/>\n");
  const Status status = out.commit();
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_EQ(status.message().rfind(dir.file("missing/x.svg") + ": cannot create", 0), 0u)
      << status.message();
  EXPECT_EQ(contents_of(dir.file("plan.json")), "old\n");
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"plan.json"}));
}

TEST(OutputFiles, DirectoriesAreCreatedAndRemovedAgainOnFailure) {
  TempDir dir;
  OutputFiles out;
  out.add_directory(dir.file("a/b"));
  out.add(dir.file("a/b/plan.json"), "{}\n");
  ASSERT_TRUE(out.commit().is_ok());
  EXPECT_EQ(contents_of(dir.file("a/b/plan.json")), "{}\n");

  out.add_directory(dir.file("c/d"));
  out.add(dir.file("c/d/plan.json"), "{}\n");
  out.add(dir.file("missing/plan.json"), "{}\n");
  EXPECT_FALSE(out.commit().is_ok());
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"a"}));
}

TEST(OutputFiles, CheckOutputFileNamesTheOptionAndWhatIsWrong) {
  TempDir dir;
  std::ofstream(dir.file("a-file")) << "x";
  EXPECT_TRUE(check_output_file("--out", dir.file("new.json")).is_ok());
  EXPECT_TRUE(check_output_file("--out", dir.file("a-file")).is_ok());
  const std::string missing = dir.file("missing/x.svg");
  EXPECT_EQ(check_output_file("--svg", missing).message(),
            "--svg: " + missing + ": no such directory '" + dir.file("missing") + "'");
  EXPECT_EQ(check_output_file("--svg", missing).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(check_output_file("--out", dir.path()).message(),
            "--out: " + dir.path() + ": is a directory, expected a file name");
  EXPECT_EQ(check_output_file("--out", dir.path() + "/").message(),
            "--out: " + dir.path() + "/: is a directory, expected a file name");
  EXPECT_EQ(
      check_output_file("--out", dir.file("a-file/x.json")).message(),
      "--out: " + dir.file("a-file/x.json") + ": '" + dir.file("a-file") + "' is not a directory");
  EXPECT_EQ(check_output_file("--trace", "/dev/null").message(),
            "--trace: /dev/null: exists and is not a regular file");
  EXPECT_EQ(check_output_file("--out", "").message(), "--out: expected a file name");
}

TEST(OutputFiles, CheckOutputDirectoryAcceptsOneToCreate) {
  TempDir dir;
  std::ofstream(dir.file("a-file")) << "x";
  EXPECT_TRUE(check_output_directory("--out-dir", dir.path()).is_ok());
  EXPECT_TRUE(check_output_directory("--out-dir", dir.file("new/deeper")).is_ok());
  EXPECT_TRUE(check_output_directory("--out-dir", dir.file("new/")).is_ok());
  // Relative to the working directory, above which nothing needs to exist.
  const std::string relative = "motley-output-files-test-" + std::to_string(::getpid());
  ASSERT_FALSE(fs::exists(relative));
  EXPECT_TRUE(check_output_directory("--out-dir", relative + "/deeper").is_ok());
  EXPECT_TRUE(check_output_file("--out", "plan.json").is_ok());
  EXPECT_EQ(check_output_directory("--checkpoint-dir", dir.file("a-file")).message(),
            "--checkpoint-dir: " + dir.file("a-file") + ": exists and is not a directory");
  EXPECT_EQ(check_output_directory("--checkpoint-dir", dir.file("a-file/sub")).message(),
            "--checkpoint-dir: " + dir.file("a-file/sub") + ": '" + dir.file("a-file") +
                "' is not a directory");
}

// What `checks` returns, computed by a process without root's right to write anywhere: this
// process itself, or (under root) a forked child that has become user and group 65534
// ("nobody"), its text handed back through a pipe. "" when the child could not drop root.
std::string as_unprivileged_user(const std::function<std::string()>& checks) {
  if (::geteuid() != 0) return checks();
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string text;
    if (::setgid(65534) == 0 && ::setuid(65534) == 0) text = checks();
    const ssize_t written = ::write(pipe_fds[1], text.data(), text.size());
    ::_exit(written == static_cast<ssize_t>(text.size()) ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return text;
}

TEST(OutputFiles, AReadOnlyDirectoryIsRefused) {
  TempDir dir;
  fs::create_directory(dir.file("ro"));
  // Readable and searchable by everyone, writable by no one (root aside, hence the child).
  fs::permissions(dir.file("ro"), fs::perms::owner_read | fs::perms::owner_exec |
                                      fs::perms::group_read | fs::perms::group_exec |
                                      fs::perms::others_read | fs::perms::others_exec);
  const std::string seen = as_unprivileged_user([&dir] {
    return check_output_file("--out", dir.file("ro/x.json")).message() + "\n" +
           check_output_directory("--out-dir", dir.file("ro")).message();
  });
  EXPECT_EQ(seen, "--out: " + dir.file("ro/x.json") + ": directory '" + dir.file("ro") +
                      "' is not writable\n--out-dir: " + dir.file("ro") +
                      ": the directory is not writable");
  fs::permissions(dir.file("ro"), fs::perms::owner_all);
}

TEST(OutputFiles, TemporariesAreRecognisedByName) {
  EXPECT_EQ(temporary_target(".plan.json.tmp.Ab12Cd"), "plan.json");
  EXPECT_EQ(temporary_target(".layer-3.bin.tmp.zzzzzz"), "layer-3.bin");
  EXPECT_EQ(temporary_target("plan.json"), std::nullopt);
  EXPECT_EQ(temporary_target(".plan.json"), std::nullopt);
  EXPECT_EQ(temporary_target(".plan.json.tmp.Ab12C"), std::nullopt);
  EXPECT_EQ(temporary_target(".plan.json.tmp.Ab-2Cd"), std::nullopt);
  EXPECT_EQ(temporary_target("..tmp.Ab12Cd"), std::nullopt);
  EXPECT_EQ(temporary_target(".tmp.Ab12Cd"), std::nullopt);
}

}  // namespace
}  // namespace motley
