// Errors: user errors (bad input: IR text, program, arguments) are kept apart from internal
// errors (a bug in xjit). Both carry a location: IR text line:col or the user's source line.
#pragma once

#include "xjit/ir/ir.h"

#include <stdexcept>
#include <string>

namespace xjit {

enum class ErrorKind { User, Internal };

class Error : public std::runtime_error {
public:
  Error(ErrorKind kind, std::string message, std::string hint = "")
      : std::runtime_error(message), kind_(kind), hint_(std::move(hint)) {}
  ErrorKind kind() const { return kind_; }
  const std::string &hint() const { return hint_; }

private:
  ErrorKind kind_;
  std::string hint_;
};

/// Malformed IR text: "file:line:col: error: message".
class ParseError : public Error {
public:
  ParseError(std::string file, int line, int col, std::string message);
  int line() const { return line_; }
  int col() const { return col_; }
  /// The bare message without the position.
  const std::string &message() const { return message_; }

private:
  int line_, col_;
  std::string message_;
};

/// An op that fails verification: message names the op and its source location.
class VerifyError : public Error {
public:
  VerifyError(const Op *op, const std::string &message);
};

} // namespace xjit
