#include "text/espeak_workers.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "core/error.h"
#include "text/espeak_engine.h"

extern char** environ;

namespace voxd::text {
namespace {

// A frame is its payload's length (4 bytes, this machine's byte order: both ends are on it) and
// the payload. A request: the phoneme mode, the language, the clause count and the clauses; the
// ready check is a request with no language and no clauses. An answer: a status (kAnswer and the
// outputs, or kInputError / kError and a message).
constexpr uint32_t kMaxFrameBytes = 64u << 20;
// How long a worker that failed may take to finish exiting (one that has just crashed may still
// be on its way out), so that its end can be told, before it is killed.
constexpr std::chrono::milliseconds kExitGrace{100};
enum Status : uint8_t { kAnswer = 0, kInputError = 1, kError = 2 };

class FrameWriter {
 public:
  FrameWriter() : bytes_(sizeof(uint32_t), '\0') {}
  void u32(uint32_t value) { bytes_.append(reinterpret_cast<const char*>(&value), sizeof value); }
  void text(std::string_view value) {
    u32(static_cast<uint32_t>(value.size()));
    bytes_.append(value);
  }
  void byte(uint8_t value) { bytes_.push_back(static_cast<char>(value)); }
  // The frame, its length filled in.
  std::string finish() && {
    const uint32_t length = static_cast<uint32_t>(bytes_.size() - sizeof(uint32_t));
    std::memcpy(bytes_.data(), &length, sizeof length);
    return std::move(bytes_);
  }

 private:
  std::string bytes_;
};

// Reads a payload; each read is false once the payload has too few bytes left.
class FrameReader {
 public:
  explicit FrameReader(std::string_view payload) : rest_(payload) {}
  bool u32(uint32_t& value) {
    if (rest_.size() < sizeof value) return false;
    std::memcpy(&value, rest_.data(), sizeof value);
    rest_.remove_prefix(sizeof value);
    return true;
  }
  bool byte(uint8_t& value) {
    if (rest_.empty()) return false;
    value = static_cast<uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return true;
  }
  bool text(std::string& value) {
    uint32_t size = 0;
    if (!u32(size) || rest_.size() < size) return false;
    value.assign(rest_.substr(0, size));
    rest_.remove_prefix(size);
    return true;
  }
  bool texts(std::vector<std::string>& values) {
    uint32_t count = 0;
    // Every text takes at least its length's four bytes: a count past that is nonsense.
    if (!u32(count) || count > rest_.size() / sizeof(uint32_t)) return false;
    values.resize(count);
    for (std::string& value : values) {
      if (!text(value)) return false;
    }
    return true;
  }
  bool done() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

std::string request_frame(const std::vector<std::string>& clauses, const std::string& language,
                          int phoneme_mode) {
  FrameWriter frame;
  frame.u32(static_cast<uint32_t>(phoneme_mode));
  frame.text(language);
  frame.u32(static_cast<uint32_t>(clauses.size()));
  for (const std::string& clause : clauses) frame.text(clause);
  return std::move(frame).finish();
}

// The outputs in an answer's payload when it has `count`; throws the InputError or Error it
// carries; nullopt for a payload that is neither.
std::optional<std::vector<std::string>> read_answer(std::string_view payload, size_t count) {
  FrameReader answer(payload);
  uint8_t status = kError;
  if (!answer.byte(status)) return std::nullopt;
  if (status == kAnswer) {
    std::vector<std::string> outputs;
    if (answer.texts(outputs) && answer.done() && outputs.size() == count) return outputs;
    return std::nullopt;
  }
  std::string message;
  if (!answer.text(message) || !answer.done()) return std::nullopt;
  if (status == kInputError) throw InputError(message);
  if (status == kError) throw Error(message);
  return std::nullopt;
}

// What a read or write came to: kEnd is a read's stream ending before its first byte.
enum class IoResult { kDone, kEnd, kFailed, kTimedOut };
using Deadline = std::optional<std::chrono::steady_clock::time_point>;

// Waits until `fd` is ready for `events` (POLLIN or POLLOUT); kDone at once without a deadline,
// kTimedOut once it has passed.
IoResult wait_ready(int fd, short events, Deadline deadline) {
  if (!deadline) return IoResult::kDone;
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return IoResult::kTimedOut;
    pollfd wanted{fd, events, 0};
    const int ready = ::poll(&wanted, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return IoResult::kFailed;
    return ready == 0 ? IoResult::kTimedOut : IoResult::kDone;
  }
}

// Reads `size` bytes into `data`; kEnd if the stream ends before the first, kFailed if it ends
// (or breaks) after it; kTimedOut past `deadline`, when there is one.
IoResult read_exact(int fd, char* data, size_t size, Deadline deadline) {
  size_t got = 0;
  while (got < size) {
    if (const IoResult ready = wait_ready(fd, POLLIN, deadline); ready != IoResult::kDone) {
      return ready;
    }
    const ssize_t n = ::read(fd, data + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return got == 0 && n == 0 ? IoResult::kEnd : IoResult::kFailed;
    got += static_cast<size_t>(n);
  }
  return IoResult::kDone;
}

// Reads one frame's payload into `payload`.
IoResult read_frame(int fd, std::string& payload, Deadline deadline) {
  uint32_t length = 0;
  const IoResult header = read_exact(fd, reinterpret_cast<char*>(&length), sizeof length, deadline);
  if (header != IoResult::kDone) return header;
  if (length > kMaxFrameBytes) return IoResult::kFailed;
  payload.resize(length);
  const IoResult body = read_exact(fd, payload.data(), length, deadline);
  return body == IoResult::kEnd ? IoResult::kFailed : body;
}

// Writes all of `data`; kFailed if the other end is gone, kTimedOut past `deadline` (a worker
// that stopped reading). A socket is sent to without SIGPIPE.
IoResult write_all(int fd, std::string_view data, Deadline deadline) {
  while (!data.empty()) {
    if (const IoResult ready = wait_ready(fd, POLLOUT, deadline); ready != IoResult::kDone) {
      return ready;
    }
    // With a deadline, a send takes what the socket's buffer has room for and returns: a
    // blocking one would wait for the whole request to fit.
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | (deadline ? MSG_DONTWAIT : 0));
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, data.data(), data.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return IoResult::kFailed;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return IoResult::kDone;
}

// False when a worker between calls has closed its socket or written to it unasked.
bool idle_and_alive(int fd) {
  pollfd state{fd, POLLIN, 0};
  return ::poll(&state, 1, 0) == 0;
}

// waitpid, again when a signal interrupts it.
pid_t reap(pid_t pid, int* status, int options) {
  pid_t reaped = 0;
  do {
    reaped = ::waitpid(pid, status, options);
  } while (reaped < 0 && errno == EINTR);
  return reaped;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended";
}

std::mutex& workers_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::shared_ptr<EspeakWorkers> g_workers;

}  // namespace

// What a worker did with a request.
struct EspeakWorkers::Exchange {
  enum class Outcome { kAnswered, kDied, kTimedOut, kGarbled } outcome;
  std::string answer;  // the answer's payload, when kAnswered
};

EspeakWorkers::EspeakWorkers(const Options& options)
    : options_(options), workers_(static_cast<size_t>(std::max(options.count, 0))) {
  if (options.count < 1) throw Error("EspeakWorkers: the count must be at least 1");
  for (size_t i = workers_.size(); i > 0; --i) idle_.push_back(i - 1);  // worker 0 on top
  try {
    // All start at once, then each is waited for: eSpeak NG loads its data in each in parallel.
    for (Worker& worker : workers_) spawn(worker);
    for (Worker& worker : workers_) expect_ready(worker);
  } catch (...) {
    for (Worker& worker : workers_) stop(worker, std::chrono::steady_clock::now());
    throw;
  }
}

EspeakWorkers::~EspeakWorkers() {
  // Their input closed, the workers exit; a second for all of them, then they are killed.
  for (Worker& worker : workers_) {
    if (worker.fd >= 0) ::close(worker.fd);
    worker.fd = -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (Worker& worker : workers_) stop(worker, deadline);
}

std::vector<std::string> EspeakWorkers::phonemes(const std::vector<std::string>& clauses,
                                                 const std::string& language, int phoneme_mode) {
  Worker& worker = acquire();
  struct Release {
    EspeakWorkers& workers;
    Worker& worker;
    ~Release() { workers.release(worker); }
  } release{*this, worker};
  const std::string request = request_frame(clauses, language, phoneme_mode);
  if (request.size() - sizeof(uint32_t) > kMaxFrameBytes) {
    throw InputError("a sentence of " + std::to_string(request.size()) +
                     " bytes is more than eSpeak NG's worker takes (" +
                     std::to_string(kMaxFrameBytes) + " bytes); split the text");
  }
  if (worker.pid != 0 && !idle_and_alive(worker.fd)) {
    // It died between calls (its end of the socket is closed): a new one, before this call.
    retire(worker, "was found dead between calls");
  }
  std::string first_death;
  for (int attempt = 0;; ++attempt) {
    if (worker.pid == 0) start_again(worker);
    Exchange exchange = this->exchange(worker, request);
    if (exchange.outcome == Exchange::Outcome::kAnswered) {
      if (std::optional<std::vector<std::string>> outputs =
              read_answer(exchange.answer, clauses.size())) {
        return std::move(*outputs);
      }
      exchange.outcome = Exchange::Outcome::kGarbled;
    }
    const std::string how =
        retire(worker, exchange.outcome == Exchange::Outcome::kTimedOut ? "hung over a call"
                       : exchange.outcome == Exchange::Outcome::kGarbled
                           ? "answered something that is not an answer"
                           : "died during a call");
    const std::string program = options_.program.string();
    if (exchange.outcome == Exchange::Outcome::kTimedOut) {
      throw Error("eSpeak NG took longer than " + std::to_string(options_.timeout.count()) +
                  " ms on a sentence; its worker (" + program +
                  ") was killed and is started again");
    }
    if (exchange.outcome == Exchange::Outcome::kGarbled) {
      throw Error("the eSpeak NG worker " + program +
                  " answered something that is not an answer (" + how + "); it is started again");
    }
    if (attempt > 0) {
      throw InputError(
          "eSpeak NG cannot phonemise this text: its worker process died on it twice (" +
          first_death + ", then " + how + ")");
    }
    first_death = how;
  }
}

void EspeakWorkers::start_again(Worker& worker) {
  try {
    spawn(worker);
    expect_ready(worker);
  } catch (const std::exception& e) {
    if (options_.on_replaced) {
      options_.on_replaced(std::string("an eSpeak NG worker could not be started again: ") +
                           e.what());
    }
    throw;
  }
}

std::string EspeakWorkers::retire(Worker& worker, std::string_view why) {
  const pid_t pid = worker.pid;
  const std::string how = stop(worker, std::chrono::steady_clock::now() + kExitGrace);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++replaced_;
  }
  if (options_.on_replaced) {
    options_.on_replaced("eSpeak NG worker " + std::to_string(pid) + " " + std::string(why) + " (" +
                         how + "); it is started again");
  }
  return how;
}

std::vector<pid_t> EspeakWorkers::pids() const {
  std::vector<pid_t> pids;
  for (const Worker& worker : workers_) pids.push_back(worker.pid.load());
  return pids;
}

int64_t EspeakWorkers::replaced() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return replaced_;
}

EspeakWorkers::Worker& EspeakWorkers::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  free_.wait(lock, [this] { return !idle_.empty(); });
  // The one released last: while calls are few they go to one worker that is awake and whose
  // caches are warm, not in turn to workers that slept (on a 16-core host a thread's calls took
  // 0.45 ms each going round 4 workers, 0.63 ms round 8; session 41).
  Worker& worker = workers_[idle_.back()];
  idle_.pop_back();
  return worker;
}

void EspeakWorkers::release(Worker& worker) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(static_cast<size_t>(&worker - workers_.data()));
  }
  free_.notify_one();
}

void EspeakWorkers::spawn(Worker& worker) const {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    throw Error(std::string("cannot make a socket for an eSpeak NG worker: ") + strerror(errno));
  }
  // The worker's end becomes its standard input and output; every other descriptor is closed.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  const std::string program = options_.program.string();
  char* argv[] = {const_cast<char*>(program.c_str()), nullptr};
  pid_t pid = 0;
  // No signal blocked in the worker, whatever the spawning thread blocks (voxd serve's threads
  // leave SIGINT and SIGTERM to one of them); the worker ignores those two itself.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  const int failed = ::posix_spawn(&pid, program.c_str(), &actions, &attributes, argv, environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(ends[1]);
  if (failed != 0) {
    ::close(ends[0]);
    throw Error("cannot start the eSpeak NG worker " + program + ": " + strerror(failed));
  }
  worker.pid = pid;
  worker.fd = ends[0];
}

void EspeakWorkers::expect_ready(Worker& worker) {
  const Exchange exchange = this->exchange(worker, request_frame({}, "", 0));
  std::string failure;
  if (exchange.outcome == Exchange::Outcome::kAnswered) {
    try {
      if (read_answer(exchange.answer, 0)) return;
      failure = ": it answered something that is not an answer";
    } catch (const Error& e) {
      failure = std::string(": ") + e.what();
    }
  }
  const std::string how = stop(worker, std::chrono::steady_clock::now() + kExitGrace);
  const std::string program = options_.program.string();
  if (exchange.outcome == Exchange::Outcome::kTimedOut) {
    throw Error("the eSpeak NG worker " + program + " did not answer within " +
                std::to_string(options_.timeout.count()) + " ms of its start");
  }
  throw Error("the eSpeak NG worker " + program + " did not start" +
              (failure.empty() ? " (" + how + ")" : failure));
}

EspeakWorkers::Exchange EspeakWorkers::exchange(const Worker& worker,
                                                const std::string& request) const {
  // One deadline for the whole call: the request written, the answer read.
  const Deadline deadline = std::chrono::steady_clock::now() + options_.timeout;
  Exchange exchange{Exchange::Outcome::kDied, {}};
  IoResult result = write_all(worker.fd, request, deadline);
  if (result == IoResult::kDone) result = read_frame(worker.fd, exchange.answer, deadline);
  if (result == IoResult::kDone) exchange.outcome = Exchange::Outcome::kAnswered;
  if (result == IoResult::kTimedOut) exchange.outcome = Exchange::Outcome::kTimedOut;
  return exchange;
}

std::string EspeakWorkers::stop(Worker& worker, std::chrono::steady_clock::time_point deadline) {
  if (worker.fd >= 0) ::close(worker.fd);
  worker.fd = -1;
  if (worker.pid <= 0) return "not running";
  int status = 0;
  pid_t reaped = reap(worker.pid, &status, WNOHANG);
  while (reaped == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    reaped = reap(worker.pid, &status, WNOHANG);
  }
  if (reaped == 0) {
    ::kill(worker.pid, SIGKILL);
    reaped = reap(worker.pid, &status, 0);
  }
  worker.pid = 0;
  return reaped > 0 ? describe_exit(status) : "gone";
}

std::optional<std::filesystem::path> find_espeak_worker_program() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) candidates.push_back(self.parent_path() / "voxd-espeak-worker");
  candidates.push_back(fs::path(VOXD_INSTALLED_LIBEXEC_DIR) / "voxd-espeak-worker");
  for (const fs::path& candidate : candidates) {
    if (fs::is_regular_file(candidate, error) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

void use_espeak_workers(std::shared_ptr<EspeakWorkers> workers) {
  std::lock_guard<std::mutex> lock(workers_mutex());
  g_workers = std::move(workers);
}

std::shared_ptr<EspeakWorkers> espeak_workers() {
  std::lock_guard<std::mutex> lock(workers_mutex());
  return g_workers;
}

int serve_espeak_requests(int in_fd, int out_fd) {
  ::signal(SIGPIPE, SIG_IGN);
  std::string payload;
  for (;;) {
    const IoResult read = read_frame(in_fd, payload, std::nullopt);
    if (read == IoResult::kEnd) return 0;
    if (read != IoResult::kDone) return 1;
    FrameReader request(payload);
    uint32_t mode = 0;
    std::string language;
    std::vector<std::string> clauses;
    if (!request.u32(mode) || !request.text(language) || !request.texts(clauses) ||
        !request.done()) {
      return 1;
    }
    FrameWriter answer;
    try {
      if (language.empty() && clauses.empty()) {
        initialize_espeak();
        answer.byte(kAnswer);
        answer.u32(0);
      } else {
        const std::vector<std::string> outputs =
            espeak_phonemes_in_process(clauses, language, static_cast<int>(mode));
        answer.byte(kAnswer);
        answer.u32(static_cast<uint32_t>(outputs.size()));
        for (const std::string& output : outputs) answer.text(output);
      }
    } catch (const InputError& e) {
      answer = FrameWriter();
      answer.byte(kInputError);
      answer.text(e.what());
    } catch (const std::exception& e) {
      answer = FrameWriter();
      answer.byte(kError);
      answer.text(e.what());
    }
    if (write_all(out_fd, std::move(answer).finish(), std::nullopt) != IoResult::kDone) return 1;
  }
}

}  // namespace voxd::text
