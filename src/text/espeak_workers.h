// eSpeak NG in worker processes (the voxd-espeak-worker program), so that a server's admission
// threads phonemise sentences at the same time: libespeak-ng keeps process-wide state and runs
// one call at a time in a process. A worker that crashes or hangs on hostile text is killed and
// started again; the server goes on.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace voxd::text {

// A fixed set of worker processes, each answering one call at a time. Thread-safe: a call waits
// for an idle worker, and takes the one released last.
class EspeakWorkers {
 public:
  struct Options {
    std::filesystem::path program;  // voxd-espeak-worker
    int count = 1;
    // Longest a worker may take over one call; then it is killed and started again.
    std::chrono::milliseconds timeout{10'000};
    // Called, on the calling thread and without the workers' lock, each time a worker is
    // replaced, with what happened ("eSpeak NG worker 1234 died during a call (killed by
    // signal 11 (Segmentation fault)); it is started again"), and when one cannot be started
    // again; may be empty.
    std::function<void(const std::string& what)> on_replaced;
  };

  // Starts the workers and waits until each has loaded eSpeak NG's data; Error naming the
  // program if one cannot start or answer.
  explicit EspeakWorkers(const Options& options);
  // Closes the workers' input, so that they exit, and kills one still running after a second.
  // No call may be in flight.
  ~EspeakWorkers();
  EspeakWorkers(const EspeakWorkers&) = delete;
  EspeakWorkers& operator=(const EspeakWorkers&) = delete;

  // espeak_phonemes_in_process's answer (text/espeak_engine.h), from an idle worker, with its
  // InputError for a language eSpeak has no voice for. A worker that dies during the call is
  // started again and the call tried once more: InputError if the text kills that one too.
  // Error if the worker takes longer than the timeout or answers nonsense (it is replaced).
  std::vector<std::string> phonemes(const std::vector<std::string>& clauses,
                                    const std::string& language, int phoneme_mode);

  int count() const { return static_cast<int>(workers_.size()); }
  // Each worker's process id; 0 for one that died and is started again by its next call.
  std::vector<pid_t> pids() const;
  // Workers killed or found dead, and replaced.
  int64_t replaced() const;

 private:
  struct Worker {
    std::atomic<pid_t> pid{0};  // read by pids() while the worker is in a call
    int fd = -1;  // this process's end of the worker's socket: its standard input and output
  };
  struct Exchange;

  Worker& acquire();
  void release(Worker& worker);
  void spawn(Worker& worker) const;
  void expect_ready(Worker& worker);
  Exchange exchange(const Worker& worker, const std::string& request) const;
  // Closes the worker's socket, waits until `deadline` for it to exit, else kills it; says how
  // it ended ("killed by signal 11").
  static std::string stop(Worker& worker, std::chrono::steady_clock::time_point deadline);
  // stop() for a worker that failed as `why` says, counted and reported (on_replaced); the next
  // call starts another. Returns how it ended.
  std::string retire(Worker& worker, std::string_view why);
  // spawn() and expect_ready() for a slot whose worker was retired; a failure is reported
  // (on_replaced) and rethrown.
  void start_again(Worker& worker);

  Options options_;
  std::vector<Worker> workers_;
  mutable std::mutex mutex_;
  std::condition_variable free_;  // a worker was released
  // The workers no call holds, the one released last at the back; guarded by mutex_.
  std::vector<size_t> idle_;
  int64_t replaced_ = 0;
};

// voxd-espeak-worker beside this process's executable, else the installed one; nullopt if
// neither is there.
std::optional<std::filesystem::path> find_espeak_worker_program();

// Sends this process's eSpeak NG calls (every Phonemizer's) to `workers`; nullptr: back into
// this process.
void use_espeak_workers(std::shared_ptr<EspeakWorkers> workers);

// The workers this process's eSpeak NG calls go to; nullptr when they run in this process.
std::shared_ptr<EspeakWorkers> espeak_workers();

// voxd-espeak-worker's loop: answers the requests read from `in_fd` on `out_fd` until `in_fd`
// ends (returns 0) or carries something that is not a request, or `out_fd` is closed (1).
int serve_espeak_requests(int in_fd, int out_fd);

}  // namespace voxd::text
