// Error type for everything voxd reports to a user: the message says what is wrong and where
// (which file, which tensor, which field, what was expected).
#pragma once

#include <stdexcept>
#include <string>

namespace voxd {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Thrown for bad input from a user (arguments, text, files); the CLI maps it to exit code 2.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(message) {}
};

// Well-formed input that is more than a model takes (a sentence past its positions or its token
// limit): the message says what to shorten; the server answers 413 input_too_long.
class InputTooLongError : public InputError {
 public:
  explicit InputTooLongError(const std::string& message) : InputError(message) {}
};

}  // namespace voxd

#define VOXD_CHECK(cond, msg)                                                             \
  do {                                                                                    \
    if (!(cond))                                                                          \
      throw ::voxd::Error(std::string("internal check failed: ") + #cond + ": " + (msg)); \
  } while (0)
