// A memory amount as users write it on the command line or in the environment: a byte count
// ("8000000000", "512MiB", "8GiB", "8GB") or a fraction of the device's memory ("0.5"). Used for
// the caching allocator's hard limit and its max_split_size (docs/memory.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace voxd {

class MemoryAmount {
 public:
  // Whether zero bytes is an amount the option takes (a cap where 0 means "none").
  enum class Zero { kRefused, kAllowed };

  // Parses `text`: an integer byte count; a number with a unit B, KB, MB, GB, TB (powers of
  // 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive ("1.5GiB"); or a fraction in
  // (0, 1] without a unit ("0.5", "1.0"). Throws voxd::InputError naming `option` and the
  // accepted forms, and for zero bytes ("0", "0MiB") unless `zero` allows it.
  static MemoryAmount parse(std::string_view text, std::string_view option,
                            Zero zero = Zero::kRefused);
  static MemoryAmount bytes(uint64_t bytes);
  // `fraction` in (0, 1].
  static MemoryAmount fraction(double fraction);

  bool is_fraction() const { return is_fraction_; }
  // The flag or variable the amount came from ("--gpu-memory-limit"), for messages.
  const std::string& option() const { return option_; }
  // Bytes on a device of `total` bytes (a fraction rounds down); throws voxd::InputError when the
  // amount is a fraction and `total` is 0 (unknown).
  uint64_t resolve(uint64_t total) const;
  // "8.00 GiB" or "50.0 % of the device".
  std::string to_string() const;

 private:
  MemoryAmount(uint64_t bytes, double fraction, bool is_fraction, std::string option)
      : bytes_(bytes), fraction_(fraction), is_fraction_(is_fraction), option_(std::move(option)) {}

  uint64_t bytes_;
  double fraction_;
  bool is_fraction_;
  std::string option_;
};

}  // namespace voxd
