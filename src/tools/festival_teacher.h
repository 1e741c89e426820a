// Festival (the Edinburgh speech synthesis system, Debian's `festival`) as a teacher: a voice such
// as cmu_us_slt_arctic_hts (Debian's festvox-us-slt-hts, HTS voice of CMU ARCTIC's speaker SLT)
// speaks each sentence; the phoneme events are the start times of the utterance's segments.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tools/teacher.h"

namespace voxd::tools {

// One `festival --pipe` process kept for all the sentences of a worker (Festival's output does
// not depend on what it said before: the same sentence gives the same samples). Segment names
// come as ARPAbet ("HH", "IY"; Festival's reduced vowel "ax" as "AH0", CMUdict's name for it;
// "pau" as a pause), so that align() matches them with the ARPAbet front end's tokens. The audio
// (32 kHz for the CMU ARCTIC HTS voices) is resampled to kSampleRate with libsoxr.
class FestivalTeacher final : public Teacher {
 public:
  // Starts `command` (the festival program and its options, "--pipe" added; by default the
  // `festival` on the PATH) with voice `voice` (its name without "voice_", e.g.
  // "cmu_us_slt_arctic_hts"), its WAV files written in `scratch_dir` (which must exist). Error if
  // Festival cannot be run; InputError if it has no such voice. Sets the process's SIGPIPE to
  // ignored, so that a Festival that has gone shows as a failed write, not a signal.
  FestivalTeacher(std::string voice, const std::string& scratch_dir,
                  std::vector<std::string> command = {"festival"});
  // Ends the process (its input closed; killed if it has not ended within seconds) and removes
  // its WAV file.
  ~FestivalTeacher() override;
  FestivalTeacher(const FestivalTeacher&) = delete;
  FestivalTeacher& operator=(const FestivalTeacher&) = delete;

  Utterance speak(const std::string& sentence) override;
  std::string description() const override;

 private:
  // Sends `scheme` and returns Festival's output lines up to its end marker. Error, saying what
  // it was `doing`, if Festival has gone or does not answer within two minutes.
  std::vector<std::string> exchange(const std::string& scheme, const std::string& doing);
  // Closes Festival's input, waits for it to end (killing it after a few seconds) and removes
  // the WAV file.
  void stop();

  std::string voice_;
  std::string version_;
  std::string wav_path_;
  pid_t pid_ = -1;
  int to_festival_ = -1;
  int from_festival_ = -1;
  std::string pending_;  // output read past the last line taken
};

// Festival's segment name as the ARPAbet name the teacher gives it ("" for a pause).
std::string festival_phoneme(const std::string& segment);

}  // namespace voxd::tools
