#include "tools/festival_teacher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <soxr.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "tools/fd_write.h"
#include "tools/wav.h"

namespace voxd::tools {
namespace {

constexpr const char* kEnd = "voxd-end";
// How long Festival may take to answer one exchange (a sentence takes well under a second).
constexpr int kAnswerTimeoutMs = 120'000;
// How long Festival may take to end once its input is closed.
constexpr int kStopWaitMs = 5'000;

// `text` as a Scheme string literal.
std::string scheme_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' || c == '\r' ? ' ' : c;
  }
  return out + "\"";
}

// What the process is given first: the voice, the function each sentence calls (synthesis, the
// WAV file, one "seg NAME END" line per segment, then "voxd-done"), Festival's version.
std::string prelude(const std::string& voice) {
  return "(begin (voice_" + voice +
         ") (format t \"voxd-voice\\n\"))\n"
         "(define (voxd_say text path)\n"
         "  (let ((utt (utt.synth (eval (list 'Utterance 'Text text)))))\n"
         "    (utt.save.wave utt path 'riff)\n"
         "    (mapcar (lambda (s) (format t \"seg %s %f\\n\" (item.name s) (item.feat s "
         "\"end\")))\n"
         "            (utt.relation.items utt 'Segment))\n"
         "    (format t \"voxd-done\\n\")))\n"
         "(format t \"voxd-version %s\\n\" festival_version)\n";
}

// 16-bit `samples` at `from` Hz as 16-bit samples at `to` Hz (libsoxr, high quality, rounded and
// clipped without dither, so that the same input gives the same samples).
std::vector<int16_t> resampled(const std::vector<int16_t>& samples, int from, int to) {
  if (from == to) return samples;
  std::vector<int16_t> out(
      static_cast<size_t>(std::llround(static_cast<double>(samples.size()) * to / from)));
  size_t done = 0;
  soxr_io_spec_t io = soxr_io_spec(SOXR_INT16_I, SOXR_INT16_I);
  io.flags |= SOXR_NO_DITHER;
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_error_t error = soxr_oneshot(from, to, 1, samples.data(), samples.size(), nullptr,
                                          out.data(), out.size(), &done, &io, &quality, nullptr);
  if (error != nullptr) throw Error(std::string("resampling Festival's audio failed: ") + error);
  out.resize(done);
  return out;
}

}  // namespace

std::string festival_phoneme(const std::string& segment) {
  if (segment == "pau") return "";
  if (segment == "ax") return "AH0";
  std::string name = segment;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return name;
}

FestivalTeacher::FestivalTeacher(std::string voice, const std::string& scratch_dir,
                                 std::vector<std::string> command)
    : voice_(std::move(voice)) {
  if (command.empty()) throw InputError("the Festival command is empty");
  command.emplace_back("--pipe");
  std::vector<char*> argv;
  for (std::string& word : command) argv.push_back(word.data());
  argv.push_back(nullptr);
  int to[2] = {-1, -1}, from[2] = {-1, -1};
  const auto close_pipes = [&] {
    for (int fd : {to[0], to[1], from[0], from[1]}) {
      if (fd >= 0) ::close(fd);
    }
  };
  if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) {
    close_pipes();
    throw Error("cannot create pipes for Festival");
  }
  std::fflush(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) {
    close_pipes();
    throw Error("cannot start a process for Festival");
  }
  if (pid_ == 0) {
    ::dup2(to[0], STDIN_FILENO);
    ::dup2(from[1], STDOUT_FILENO);
    for (int fd : {to[0], to[1], from[0], from[1]}) ::close(fd);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  to_festival_ = to[1];
  from_festival_ = from[0];
  wav_path_ = (std::filesystem::path(scratch_dir) /
               (".festival-" + std::to_string(::getpid()) + "-" + std::to_string(pid_) + ".wav"))
                  .string();
  ::signal(SIGPIPE, SIG_IGN);
  try {
    const std::vector<std::string> lines =
        exchange(prelude(voice_), "starting with voice '" + voice_ + "'");
    if (std::find(lines.begin(), lines.end(), "voxd-voice") == lines.end()) {
      throw InputError("Festival has no voice '" + voice_ + "' (" +
                       (voice_ == "cmu_us_slt_arctic_hts"
                            ? "Debian: apt-get install festvox-us-slt-hts"
                            : "its voices are the voice_NAME functions of its library folder") +
                       ")");
    }
    for (const std::string& line : lines) {
      if (line.starts_with("voxd-version ")) version_ = line.substr(13, line.find(':') - 13);
    }
  } catch (...) {
    stop();
    throw;
  }
}

FestivalTeacher::~FestivalTeacher() {
  stop();
}

void FestivalTeacher::stop() {
  ::close(to_festival_);
  ::close(from_festival_);
  // Its input closed, Festival ends; one that is stuck is killed after a few seconds.
  int status = 0;
  for (int waited_ms = 0; ::waitpid(pid_, &status, WNOHANG) == 0; waited_ms += 10) {
    if (waited_ms >= kStopWaitMs) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    ::usleep(10'000);
  }
  std::error_code ignored;
  std::filesystem::remove(wav_path_, ignored);
}

std::vector<std::string> FestivalTeacher::exchange(const std::string& scheme,
                                                   const std::string& doing) {
  // Festival's output is buffered when it goes to a pipe: (fflush nil) sends it.
  if (!write_all(to_festival_, scheme + "(format t \"" + kEnd + "\\n\")\n(fflush nil)\n")) {
    throw Error("Festival is not running, " + doing + " (see its messages above)");
  }
  std::vector<std::string> lines;
  char buffer[4096];
  for (;;) {
    for (size_t newline; (newline = pending_.find('\n')) != std::string::npos;) {
      std::string line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      if (line == kEnd) return lines;
      lines.push_back(std::move(line));
    }
    pollfd ready{from_festival_, POLLIN, 0};
    const int polled = ::poll(&ready, 1, kAnswerTimeoutMs);
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0) {
      throw Error("Festival did not answer within " + std::to_string(kAnswerTimeoutMs / 1000) +
                  " s, " + doing);
    }
    const ssize_t n = polled < 0 ? -1 : ::read(from_festival_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error("Festival ended, " + doing +
                  " (see its messages above; is `festival` installed and runnable?)");
    }
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

Utterance FestivalTeacher::speak(const std::string& sentence) {
  const std::vector<std::string> lines =
      exchange("(voxd_say " + scheme_string(sentence) + " " + scheme_string(wav_path_) + ")\n",
               "speaking \"" + sentence + "\"");
  if (std::find(lines.begin(), lines.end(), "voxd-done") == lines.end()) {
    throw Error("Festival failed to speak \"" + sentence + "\" (see its messages above)");
  }
  int rate = 0;
  const std::vector<int16_t> audio = read_wav(wav_path_, rate);
  Utterance utterance;
  utterance.audio = resampled(audio, rate, kSampleRate);
  const auto samples = static_cast<int64_t>(utterance.audio.size());
  int64_t start = 0;
  for (const std::string& line : lines) {
    if (!line.starts_with("seg ")) continue;
    std::istringstream fields(line.substr(4));
    std::string name;
    double end = 0.0;
    if (!(fields >> name >> end)) throw Error("unexpected line from Festival: " + line);
    utterance.events.push_back({festival_phoneme(name), std::min(start, samples)});
    start = std::llround(end * kSampleRate);
  }
  return utterance;
}

std::string FestivalTeacher::description() const {
  return "festival " + version_ + " " + voice_;
}

}  // namespace voxd::tools
