// `motley launch`: starts N local processes of this binary as the ranks of one torch-style
// distributed job (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// forwards their output line by line prefixed "[rank k] ", and fails fast: the first rank that
// exits non-zero stops the others and names itself in the error. POSIX processes and pipes
// only; it knows nothing of plans or of what the ranks run.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "launch.h"
#include "motley/core/output_files.h"
#include "option_checks.h"
#include "rank_traces.h"

extern char** environ;

namespace motley::cli {
namespace {

// One rank's process and the unfinished last line of each of its streams.
struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::string out_partial;
  std::string err_partial;
  std::string out_all;  // everything, when stdout is captured for --json
  bool exited = false;
  bool signalled = false;  // sent SIGTERM or SIGKILL by stop_all before it had exited
  int wait_status = 0;
};

Result<int> free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return io_error(std::string("launch: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) return io_error(std::string("launch: finding a free port: ") + std::strerror(error));
  return static_cast<int>(ntohs(addr.sin_port));
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return fmt::format("was killed by signal {} ({})", sig, name ? name : "?");
  }
  return fmt::format("ended with wait status {}", status);
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

void write_all(FILE* stream, const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stream);
  std::fflush(stream);
}

// Emits the complete lines of `partial` (all of it at end of stream) with the rank's prefix,
// handing each to `on_line` (when set) without it.
void emit_lines(std::string* partial, int rank, FILE* stream, bool at_end,
                const LineHandler& on_line = nullptr) {
  const std::string prefix = fmt::format("[rank {}] ", rank);
  size_t begin = 0;
  std::string text;
  for (size_t nl; (nl = partial->find('\n', begin)) != std::string::npos; begin = nl + 1) {
    text += prefix + partial->substr(begin, nl - begin + 1);
    if (on_line) on_line(rank, partial->substr(begin, nl - begin));
  }
  partial->erase(0, begin);
  if (at_end && !partial->empty()) {
    text += prefix + *partial + "\n";
    if (on_line) on_line(rank, *partial);
    partial->clear();
  }
  if (!text.empty()) write_all(stream, text);
}

// Reads what is available on `fd`; closes it and returns false at end of stream.
bool drain(int* fd, Child& c, bool is_out, bool capture_out, const LineHandler& on_line) {
  char buffer[4096];
  const ssize_t n = ::read(*fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    ::close(*fd);
    *fd = -1;
    if (is_out && !capture_out) emit_lines(&c.out_partial, c.rank, stdout, true, on_line);
    if (!is_out) emit_lines(&c.err_partial, c.rank, stderr, true);
    return false;
  }
  const std::string chunk(buffer, static_cast<size_t>(n));
  if (is_out && capture_out) {
    c.out_all += chunk;
  } else if (is_out) {
    c.out_partial += chunk;
    emit_lines(&c.out_partial, c.rank, stdout, false, on_line);
  } else {
    c.err_partial += chunk;
    emit_lines(&c.err_partial, c.rank, stderr, false);
  }
  return true;
}

Result<pid_t> spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    int out_fd, int err_fd, int close_out, int close_err) {
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return io_error(std::string("launch: fork: ") + std::strerror(errno));
  if (pid == 0) {
    // The ranks must not outlive the launcher, however it ends.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::close(out_fd);
    ::close(err_fd);
    ::close(close_out);
    ::close(close_err);
    ::execve("/proc/self/exe", args.data(), envp.data());
    const char* msg = "motley launch: cannot execute /proc/self/exe\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, std::strlen(msg));
    (void)ignored;
    ::_exit(127);
  }
  return pid;
}

std::vector<std::string> child_environment(int rank, int world, int port, int threads,
                                           const std::vector<std::string>& extra) {
  static const char* const kOwn[] = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK",   "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "MOTLEY_LAUNCH"};
  std::vector<std::string> env;
  bool has_blas = false, has_omp = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (std::find(std::begin(kOwn), std::end(kOwn), name) != std::end(kOwn)) continue;
    has_blas = has_blas || name == "OPENBLAS_NUM_THREADS";
    has_omp = has_omp || name == "OMP_NUM_THREADS";
    env.push_back(entry);
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(world));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("MOTLEY_LAUNCH=1");  // the ranks leave naming the merged trace to launch
  for (const std::string& entry : extra) {
    const std::string name = entry.substr(0, entry.find('=') + 1);
    std::erase_if(env, [&name](const std::string& e) { return e.rfind(name, 0) == 0; });
    env.push_back(entry);
  }
  // OpenBLAS sizes its pool when it is loaded, before the rank can limit it.
  if (!has_blas) env.push_back("OPENBLAS_NUM_THREADS=" + std::to_string(threads));
  if (!has_omp) env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  return env;
}

// The trace file of a `run` command (`--trace PATH` or `--trace=PATH`, the last one given), or
// "" when it writes none: each rank then writes rank_trace_path(PATH, rank), merged afterwards.
std::string run_trace_path(const std::vector<std::string>& command) {
  if (command.empty() || command[0] != "run") return "";
  return command_option(command, "--trace").value_or("");
}

void stop_all(std::vector<Child>& children) {
  for (Child& c : children) {
    if (!c.exited) {
      ::kill(c.pid, SIGTERM);
      c.signalled = true;
    }
  }
  // A short grace period, then no more.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    bool running = false;
    for (Child& c : children) {
      if (!c.exited && ::waitpid(c.pid, &c.wait_status, WNOHANG) == c.pid) c.exited = true;
      running = running || !c.exited;
    }
    if (!running) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (Child& c : children) {
    if (!c.exited) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &c.wait_status, 0);
      c.exited = true;
    }
  }
}

}  // namespace

std::optional<std::string> command_option(const std::vector<std::string>& command,
                                          const std::string& name) {
  std::optional<std::string> value;
  for (size_t i = 1; i < command.size(); ++i) {
    if (command[i] == name && i + 1 < command.size()) {
      value = command[++i];
    } else if (command[i].rfind(name + "=", 0) == 0) {
      value = command[i].substr(name.size() + 1);
    }
  }
  return value;
}

Status run_job(const LaunchOptions& opt, std::vector<int>* failed_ranks) {
  if (opt.command.empty()) {
    return invalid_argument(
        "give the command each rank runs after '--', e.g. "
        "'motley launch --nproc 4 -- run --plan plan.json'");
  }
  // The merged trace's path is checked before any rank starts (each rank checks its own file).
  const std::string trace = run_trace_path(opt.command);
  if (!trace.empty()) MOTLEY_RETURN_IF_ERROR(check_output_file("--trace", trace));
  int port = 0;
  if (opt.master_port) {
    port = *opt.master_port;
  } else {
    MOTLEY_ASSIGN_OR_RETURN(port, free_port());
  }
  const bool capture_json =
      std::find(opt.command.begin(), opt.command.end(), "--json") != opt.command.end();
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = std::max(1, cores / opt.nproc);

  std::vector<std::string> argv = {"motley"};
  argv.insert(argv.end(), opt.command.begin(), opt.command.end());
  std::vector<Child> children(opt.nproc);
  for (int rank = 0; rank < opt.nproc; ++rank) {
    Child& c = children[rank];
    c.rank = rank;
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      stop_all(children);
      return io_error(std::string("launch: pipe: ") + std::strerror(errno));
    }
    auto pid = spawn(argv, child_environment(rank, opt.nproc, port, threads, opt.extra_env), out[1],
                     err[1], out[0], err[0]);
    ::close(out[1]);
    ::close(err[1]);
    if (!pid.is_ok()) {
      ::close(out[0]);
      ::close(err[0]);
      stop_all(children);
      return pid.status();
    }
    c.pid = *pid;
    c.out_fd = out[0];
    c.err_fd = err[0];
  }

  // Forward output until every stream ended and every rank exited; the first failure stops the
  // others (their output so far is still forwarded).
  std::vector<const Child*> failures;
  bool stopping = false;
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is stdout)
    for (Child& c : children) {
      if (c.out_fd >= 0) {
        fds.push_back({c.out_fd, POLLIN, 0});
        owners.push_back({&c, true});
      }
      if (c.err_fd >= 0) {
        fds.push_back({c.err_fd, POLLIN, 0});
        owners.push_back({&c, false});
      }
    }
    bool all_exited = true;
    for (const Child& c : children) all_exited = all_exited && c.exited;
    if (fds.empty() && all_exited) break;
    if (!fds.empty()) {
      const int ready = ::poll(fds.data(), fds.size(), 50);
      if (ready < 0 && errno != EINTR) {
        stop_all(children);
        return io_error(std::string("launch: poll: ") + std::strerror(errno));
      }
      for (size_t i = 0; ready > 0 && i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Child& c = *owners[i].first;
        drain(owners[i].second ? &c.out_fd : &c.err_fd, c, owners[i].second, capture_json,
              opt.on_line);
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Ranks that ended since the last look; several at once are ordered signal first (the
    // likelier cause: the others usually fail because of it), then by rank.
    std::vector<Child*> ended;
    for (Child& c : children) {
      if (!c.exited && ::waitpid(c.pid, &c.wait_status, WNOHANG) == c.pid) {
        c.exited = true;
        ended.push_back(&c);
      }
    }
    std::stable_sort(ended.begin(), ended.end(), [](const Child* a, const Child* b) {
      return WIFSIGNALED(a->wait_status) && !WIFSIGNALED(b->wait_status);
    });
    for (Child* c : ended) {
      if (!stopping && failed(c->wait_status)) failures.push_back(c);
    }
    if (!failures.empty() && !stopping) {
      stopping = true;
      stop_all(children);
    }
  }

  if (!failures.empty()) {
    // The first failure, then the ranks that failed on their own meanwhile (usually because of
    // it), then those stop_all ended.
    std::vector<std::string> parts;
    for (const Child* c : failures) {
      parts.push_back(fmt::format("rank {} {}", c->rank, describe_status(c->wait_status)));
    }
    std::vector<int> stopped;
    for (const Child& c : children) {
      if (std::find(failures.begin(), failures.end(), &c) != failures.end()) continue;
      const bool by_us = c.signalled && WIFSIGNALED(c.wait_status) &&
                         (WTERMSIG(c.wait_status) == SIGTERM || WTERMSIG(c.wait_status) == SIGKILL);
      if (by_us) {
        stopped.push_back(c.rank);
      } else if (failed(c.wait_status)) {
        parts.push_back(fmt::format("rank {} {}", c.rank, describe_status(c.wait_status)));
      }
    }
    if (!stopped.empty()) {
      parts.push_back(fmt::format("stopped rank{} {}", stopped.size() > 1 ? "s" : "",
                                  fmt::join(stopped, ", ")));
    }
    if (failed_ranks != nullptr) {
      for (const Child* c : failures) failed_ranks->push_back(c->rank);
    }
    const std::string message = fmt::format("{}", fmt::join(parts, "; "));
    const Child& first = *failures.front();
    const int code = WIFEXITED(first.wait_status) ? WEXITSTATUS(first.wait_status) : 1;
    // A rank's bad input (exit 2) is the launch's bad input.
    return code == 2 ? invalid_argument(message) : io_error(message);
  }
  // Every rank succeeded, so every rank file should be there; a failed run keeps them as they are.
  if (!trace.empty()) {
    MOTLEY_RETURN_IF_ERROR(merge_rank_traces(trace, opt.nproc));
    if (!capture_json) {
      write_all(stdout, fmt::format("trace: {} (the {} ranks' files merged)\n", trace, opt.nproc));
    }
  }
  if (capture_json) {
    for (const Child& c : children) {
      if (c.out_all.find_first_not_of(" \t\r\n") != std::string::npos) {
        write_all(stdout, c.out_all);
        break;
      }
    }
  }
  return Status::ok();
}

namespace {

Status launch_command(const LaunchOptions& opt) {
  if (opt.elastic) return elastic_launch(opt);
  if (opt.nproc == 0) return invalid_argument("--nproc: give the number of ranks to start");
  return run_job(opt, nullptr);
}

}  // namespace

void add_launch_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Start N local ranks of a motley command as one distributed job");
  cmd->footer(
      "Each rank runs this binary with the arguments after '--' and RANK, WORLD_SIZE,\n"
      "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT set (and\n"
      "OPENBLAS_NUM_THREADS, OMP_NUM_THREADS = max(1, cores / N) unless already set). Output is\n"
      "forwarded line by line as '[rank k] ...'. When the command has --json, stdout is kept\n"
      "and the first rank's non-empty output (the rank that computes the loss) is printed alone.\n"
      "When a rank exits non-zero, the others are stopped (SIGTERM, then SIGKILL after 2 s) and\n"
      "launch fails naming the rank and how it ended. When every rank succeeded and the\n"
      "command is 'run ... --trace t.json', the ranks' files (t.rank0.json, ...) are merged\n"
      "into t.json (one trace, every rank's track) and removed.\n"
      "With --elastic (command 'run --plan P --checkpoint-dir D ...'), a failed job is started\n"
      "again: the nodes of the ranks that failed count as lost, P is replanned on the nodes\n"
      "left (written to D/elastic-plan-K.json), and the run resumes from D's last checkpoint\n"
      "until its --steps are done; use --checkpoint-every to bound the work a loss costs.\n"
      "Example: motley launch --nproc 4 -- run --plan plan.json --steps 3");
  cmd->add_option("--nproc", opt->nproc,
                  "Number of ranks (processes) to start (with --elastic: the plan's, by default)")
      ->check(integer_in(1, kMaxOptionThreads));
  cmd->add_flag("--elastic", opt->elastic,
                "Supervise a 'run --plan P --checkpoint-dir D' job: when ranks fail, treat their "
                "nodes as lost, replan on the rest and resume from the last checkpoint");
  cmd->add_option("--max-restarts", opt->max_restarts,
                  "With --elastic, restarts after failures before giving up")
      ->check(integer_in(0, 1000))
      ->capture_default_str();
  cmd->add_option("--master-port", opt->master_port,
                  "TCP port of rank 0's store (default: a free port)")
      ->check(integer_in(1, 65535));
  cmd->add_option("command", opt->command, "The motley command each rank runs, after '--'");
  cmd->callback([opt, action] { *action = [opt] { return launch_command(*opt); }; });
}

}  // namespace motley::cli
